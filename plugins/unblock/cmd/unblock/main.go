// Command unblock is the unblock scanner's plugin. See package
// plugins/unblock.
package main

import (
	"github.com/ffscan/ffscan/plugins/unblock"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(unblock.New())
}
