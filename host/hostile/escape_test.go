package hostile

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/plugindir"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// refusedOnHostThreads checks a signal or ptrace outcome: the plugin
// found threads of the host (each answered something other than "no such
// thread") and reached none of them, each refused with EPERM.
func refusedOnHostThreads(t *testing.T, what, outcome string) {
	t.Helper()
	assert.Contains(t, outcome, what+" reached no host thread: ", outcome)
	assert.Contains(t, outcome, "operation not permitted", "%s: want every host thread to refuse with EPERM, got %q", what, outcome)
	assert.NotContains(t, outcome, "ok: ", outcome)
}

// The host's threads are out of a confined plugin's reach: signal 0
// (the permission check), SIGSTOP (which would freeze the whole host)
// and PTRACE_SEIZE to every thread of the host fail, during scans and
// while the host reads the plugin's Info at start-up, for `ffscan run`
// and for the CLI's `plugins list|verify`. Before, the host's thread
// that started a plugin was in the plugin's Landlock domain, and signal
// 0 reached it.
func TestPluginCannotSignalOrTraceTheHost(t *testing.T) {
	requireConfinement(t)
	srv := testserver.New(t)
	c := srv.Client(t)

	// ffscan run, a process of its own: at start-up and during scans.
	h := startHostOf(t, "startup", srv.Addr, 16<<20, 2<<30, "")
	startup := attackThrough(t, c, "startup")
	t.Logf("at start-up: %s", startup)
	for _, what := range []string{"signal 0", "signal 19", "PTRACE_SEIZE"} {
		refusedOnHostThreads(t, what, startup)
	}
	refusedOnHostThreads(t, "signal 0", attackThrough(t, c, "signalhost 0"))
	refusedOnHostThreads(t, "signal 19", attackThrough(t, c, "signalhost 19"))
	refusedOnHostThreads(t, "PTRACE_SEIZE", attackThrough(t, c, "ptracehost"))
	// The host was never stopped: it still runs the plugin's scans.
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"))
	assert.NotContains(t, h.log(), "reached")

	// The CLI's commands that read a plugin's Info (in this process).
	cfg := hostConfig(t, srv.Addr, "startup")
	list, err := plugindir.List(context.Background(), cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, list[0].Err)
	require.Len(t, list[0].Scanners, 1)
	var startupOpt string
	for _, o := range list[0].Scanners[0].Options {
		if o.Name == "startup" {
			startupOpt = o.Default
		}
	}
	for _, what := range []string{"signal 0", "signal 19", "PTRACE_SEIZE"} {
		refusedOnHostThreads(t, what, startupOpt)
	}
	res, err := plugindir.Verify(context.Background(), cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err)
	}
}

// A confined plugin connects to no unix socket: not a pathname socket
// outside its directory that anyone may write to (the system D-Bus,
// docker.sock, a Valkey unixsocket stand for it), not an abstract one.
// The connect fails with EPERM and nothing reaches the listener. Before,
// the pathname connect went through and its data arrived.
func TestPluginConnectsToNoUnixSocket(t *testing.T) {
	requireConfinement(t)
	dir, err := os.MkdirTemp("", "ffscan-sock-")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	require.NoError(t, os.Chmod(dir, 0o777))
	path := filepath.Join(dir, "open.sock")
	pathLn, err := net.Listen("unix", path)
	require.NoError(t, err)
	defer pathLn.Close()
	require.NoError(t, os.Chmod(path, 0o777))
	abstract := fmt.Sprintf("@ffscan-test-%d", os.Getpid())
	abstractLn, err := net.Listen("unix", abstract)
	require.NoError(t, err)
	defer abstractLn.Close()

	a := newAttacker(t, "plain")
	toPath, toAbstract := "connect "+path, "connect "+abstract
	got := a.run(toPath, toAbstract)
	for _, at := range []string{toPath, toAbstract} {
		assert.True(t, permissionDenied(got[at]), "%s: want a permission error, got %q", at, got[at])
	}
	// Nothing is waiting to be accepted: the connects failed before the
	// scan that made them returned.
	for _, ln := range []net.Listener{pathLn, abstractLn} {
		ul := ln.(*net.UnixListener)
		require.NoError(t, ul.SetDeadline(time.Now()))
		conn, err := ul.Accept()
		if conn != nil {
			conn.Close()
		}
		var ne net.Error
		require.ErrorAs(t, err, &ne, "a connection arrived at %s", ln.Addr())
		assert.True(t, ne.Timeout(), "accept: %v", err)
	}
}

// Syscalls outside the seccomp allow-list are refused with EPERM:
// ptrace, keyctl, bpf, unshare, userfaultfd, memfd_create (with
// execveat, a way to run code Landlock never saw) and
// process_vm_readv; and a shared mapping (memory the memory limit,
// RLIMIT_DATA, does not count). Before, the filter listed what it
// denied and let these through.
func TestPluginSyscallsOutsideTheAllowListAreRefused(t *testing.T) {
	requireConfinement(t)
	a := newAttacker(t, "plain")
	var attacks []string
	for _, sc := range []string{"ptrace", "keyctl", "bpf", "unshare", "userfaultfd", "memfd_create", "sharedmem", "process_vm_readv"} {
		attacks = append(attacks, "syscall "+sc)
	}
	got := a.run(attacks...)
	for _, at := range attacks {
		assert.True(t, strings.Contains(got[at], "operation not permitted"), "%s: want EPERM, got %q", at, got[at])
	}
}
