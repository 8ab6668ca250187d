// Command depreconciler is the dependency_reconciler scanner plugin: the
// safety net that resolves dependency edges whose completion push was
// lost. See package depreconciler/depreconciler.
package main

import (
	"github.com/ffscan/ffscan/plugins/depreconciler/depreconciler"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(depreconciler.New())
}
