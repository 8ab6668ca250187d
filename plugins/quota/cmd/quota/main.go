// Command quota is the quota_reconciler plugin. See package plugins/quota.
package main

import (
	"github.com/ffscan/ffscan/plugins/quota"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(quota.New())
}
