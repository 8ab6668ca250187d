// Command cancelreconciler is the cancel_reconciler scanner plugin: it
// cancels the members of cancelled flows whose grace window has passed. See
// package plugins/cancelreconciler.
package main

import (
	"github.com/ffscan/ffscan/plugins/cancelreconciler"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(cancelreconciler.New())
}
