// Command timers is the timer scanners' plugin: one binary serving
// attempt_timeout, execution_deadline, suspension_timeout,
// pending_wp_expiry and delayed_promoter. See package plugins/timers.
package main

import (
	"github.com/ffscan/ffscan/plugins/timers"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() {
	scannerapi.Serve(timers.NewAttemptTimeout(), timers.NewExecutionDeadline(), timers.NewSuspensionTimeout(),
		timers.NewPendingWPExpiry(), timers.NewDelayedPromoter())
}
