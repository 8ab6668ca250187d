// Command edgecancel is the sibling-cancel scanners' plugin: one binary
// serving edge_cancel_dispatcher and edge_cancel_reconciler. See package
// plugins/edgecancel.
package main

import (
	"github.com/ffscan/ffscan/plugins/edgecancel"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(edgecancel.NewDispatcher(), edgecancel.NewReconciler())
}
