// Command budget is the budget scanners' plugin: one binary serving two
// scanners, budget_reset (periodic usage resets) and budget_reconciler
// (breach markers of lifetime budgets, orphan pruning). See package
// plugins/budget.
package main

import (
	"github.com/ffscan/ffscan/plugins/budget"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(budget.NewReset(), budget.NewReconciler())
}
