// Package proctest is what the tests that run processes share: a free
// loopback address for one to listen on, and whether one still runs.
package proctest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/testserver"
)

// FreeAddr is a loopback TCP address ("127.0.0.1:port") for a process the
// test starts to listen on: free when drawn, and reserved to this test
// process among all test processes on the machine (testserver.FreePort).
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := testserver.FreePort()
	require.NoError(t, err)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// Alive reports whether process pid runs: it exists and has not exited
// (a zombie has exited; it only waits to be reaped).
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// WaitGone waits until process pid no longer runs, and fails the test
// (with msgAndArgs) if it still does after timeout. A process the test
// did not start tells no one when it exits: this polls.
func WaitGone(t testing.TB, pid int, timeout time.Duration, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return !Alive(pid) }, timeout, 20*time.Millisecond, msgAndArgs...)
}
