// Command retentiontrimmer is the retention_trimmer scanner plugin: it purges
// terminal executions whose retention has passed. See package
// plugins/retentiontrimmer.
package main

import (
	"github.com/ffscan/ffscan/plugins/retentiontrimmer"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(retentiontrimmer.New())
}
