// Command observers is the observing scanners' plugin: one binary serving
// flow_projector and index_reconciler. See package plugins/observers.
package main

import (
	"github.com/ffscan/ffscan/plugins/observers"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(observers.NewFlowProjector(), observers.NewIndexReconciler())
}
