package proctest

import (
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFreeAddrCanBeListenedOn(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", FreeAddr(t))
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// A process runs until it exits; once exited it is not alive, reaped or
// still a zombie.
func TestAliveUntilTheProcessExits(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	assert.True(t, Alive(pid), "a running process")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	WaitGone(t, pid, 10*time.Second, "a killed process, not yet reaped (a zombie)")
	_ = cmd.Wait()
	assert.False(t, Alive(pid), "a reaped process")
	assert.False(t, Alive(0))
	assert.False(t, Alive(-1))
}
