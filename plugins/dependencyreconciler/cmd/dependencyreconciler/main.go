// Command dependencyreconciler is the dependency_reconciler scanner plugin: the
// safety net that resolves dependency edges whose completion push was
// lost. See package plugins/dependencyreconciler.
package main

import (
	"github.com/ffscan/ffscan/plugins/dependencyreconciler"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(dependencyreconciler.New())
}
