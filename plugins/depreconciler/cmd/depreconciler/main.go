// Command depreconciler is the dependency_reconciler scanner plugin: the
// safety net that resolves dependency edges whose completion push was
// lost. See package plugins/depreconciler.
package main

import (
	"github.com/ffscan/ffscan/plugins/depreconciler"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(depreconciler.New())
}
