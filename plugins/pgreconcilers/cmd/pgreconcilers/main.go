// Command pgreconcilers serves the reconcilers that work on a FlowFabric
// Postgres database. See package plugins/pgreconcilers.
package main

import (
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	var all []scannerapi.Scanner
	for _, r := range pgreconcilers.All() {
		all = append(all, r)
	}
	scannerapi.Serve(all...)
}
