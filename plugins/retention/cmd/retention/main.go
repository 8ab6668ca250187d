// Command retention is the retention_trimmer scanner plugin: it purges
// terminal executions whose retention has passed. See package
// plugins/retention.
package main

import (
	"github.com/ffscan/ffscan/plugins/retention"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(retention.New())
}
