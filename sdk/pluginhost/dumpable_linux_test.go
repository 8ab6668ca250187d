package pluginhost_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// dumpable reports whether this process is dumpable (PR_GET_DUMPABLE).
func dumpable(t *testing.T) bool {
	t.Helper()
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	require.NoError(t, err)
	return v != 0
}
