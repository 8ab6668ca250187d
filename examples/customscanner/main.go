// Command customscanner is an example third-party ffscan plugin: the
// delayed_watchdog scanner (package watchdog) finds executions stuck in a
// lane's delayed set long after they were due, reports them and, if asked
// to, promotes or cleans them.
//
// It is written only against ffscan's public API (sdk/scannerapi and keys),
// as a scanner in another repository would be. Build it, drop the binary
// into the host's plugin_dir, and configure it:
//
//	go build -o /var/lib/ffscan/plugins/customscanner ./examples/customscanner
//
//	scanners:
//	  delayed_watchdog:   # served by whichever binary declares it
//	    interval: 1m
//	    options: {max_age: 1h, action: report}
package main

import (
	"github.com/ffscan/ffscan/examples/customscanner/watchdog"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() { scannerapi.Serve(watchdog.New()) }
