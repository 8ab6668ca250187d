// Command leaseexpiry is the lease_expiry scanner plugin: it marks leases
// whose expiry has passed as expired. See package plugins/leaseexpiry.
package main

import (
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(leaseexpiry.New())
}
