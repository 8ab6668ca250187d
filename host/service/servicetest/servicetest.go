// Package servicetest holds what the host services' tests share for
// waiting on a service: no polling, no sleeps, a condition re-checked at
// every change the service announces.
package servicetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/service"
)

// Timeout is how long WaitFor waits unless told otherwise: far past what
// any condition of a passing test takes on a loaded machine.
const Timeout = 20 * time.Second

// WaitFor waits until cond holds, checking it at once and at every change
// ch announces, and fails the test (with msgAndArgs) if it does not hold
// within timeout (Timeout when 0).
func WaitFor(t testing.TB, ch *service.Changes, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	if timeout == 0 {
		timeout = Timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	require.NoError(t, ch.WaitFor(ctx, cond), msgAndArgs...)
}
