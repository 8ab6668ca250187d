// Command testplugin serves scannerapi's test scanners; the transport tests
// build and launch it.
package main

import (
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/internal/testscanners"
)

func main() {
	scannerapi.Serve(testscanners.All()...)
}
