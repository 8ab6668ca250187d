package pluginhost_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func launchIsolated(t *testing.T, iso pluginhost.Isolation) *pluginhost.Plugin {
	t.Helper()
	return launchWith(t, pluginhost.LaunchConfig{Isolation: iso, Callbacks: &echoCallbacks{}})
}

// probe runs the prober scanner over members and returns its notes by
// member ("ok" or the error).
func probe(t *testing.T, p *pluginhost.Plugin, members ...string) map[string]string {
	t.Helper()
	req := &scannerapi.ScanRequest{Scanner: "prober", Partition: keys.Partition{Family: keys.FamilyFlow}}
	for _, m := range members {
		req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "due", Member: m})
	}
	res, err := scannerByName(t, p, "prober").ScanPartition(context.Background(), nil, req)
	require.NoError(t, err)
	out := map[string]string{}
	for i, n := range res.Notes {
		_, outcome, _ := strings.Cut(n, ": ")
		out[members[i]] = outcome
	}
	return out
}

// A confined plugin cannot read the host's files or environment, write
// outside its socket directory, open a network socket (TCP, multipath
// TCP, a TCP listener, UDP) or signal the host; it still serves its
// scanners through the host. The same probes from an unconfined plugin
// succeed, so the refusals are the confinement's.
func TestConfinedPluginCannotEscape(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("isolation is Linux only")
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "ffscan.yaml")
	require.NoError(t, os.WriteFile(secret, []byte("valkey: {password: hunter2}\n"), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer udp.Close()
	network := []string{
		"dial:" + ln.Addr().String(),
		"mptcp:" + ln.Addr().String(),
		"listen:tcp",
		"udp:" + udp.LocalAddr().String(),
	}
	members := append([]string{
		"read:" + secret,
		"write:" + filepath.Join(dir, "dropped"),
		fmt.Sprintf("signal:%d", os.Getpid()),
		"spawn:/bin/true",
	}, network...)

	free := launchIsolated(t, pluginhost.IsolationOff)
	assert.Empty(t, free.Isolation())
	for m, outcome := range probe(t, free, members...) {
		assert.Equal(t, "ok", outcome, "unconfined %s", m)
	}
	require.NoError(t, os.Remove(filepath.Join(dir, "dropped")))

	if probeAuto := launchIsolated(t, pluginhost.IsolationAuto); strings.HasPrefix(probeAuto.Isolation(), "none") {
		// The kernel offers nothing to test; auto said so (loudly).
		t.Skipf("no confinement on this kernel: %s", probeAuto.Isolation())
	}
	p := launchIsolated(t, pluginhost.IsolationRequired)
	assert.Contains(t, p.Isolation(), "landlock ABI")
	assert.Contains(t, p.Isolation(), "TCP bind and connect denied")
	got := probe(t, p, append(members, fmt.Sprintf("environ:%d", os.Getpid()))...)
	assert.Contains(t, got["read:"+secret], "permission denied")
	assert.Contains(t, got["write:"+filepath.Join(dir, "dropped")], "permission denied")
	// Landlock refuses the connect (EACCES), or seccomp the socket
	// before it (EPERM).
	assert.Regexp(t, "permission denied|operation not permitted", got["dial:"+ln.Addr().String()])
	if strings.Contains(p.Isolation(), "no sockets but unix ones") {
		for _, m := range network[1:] {
			assert.Contains(t, got[m], "operation not permitted", m)
		}
	} else {
		t.Logf("the kernel offers no seccomp filter: %s", p.Isolation())
	}
	assert.Contains(t, got[fmt.Sprintf("environ:%d", os.Getpid())], "permission denied")
	if strings.Contains(p.Isolation(), "signals scoped") {
		assert.Contains(t, got[fmt.Sprintf("signal:%d", os.Getpid())], "operation not permitted")
	}
	if strings.Contains(p.Isolation(), "no new processes") {
		assert.Contains(t, got["spawn:/bin/true"], "operation not permitted")
	} else {
		t.Logf("the kernel offers no seccomp filter: %s", p.Isolation())
	}
	_, err = os.Stat(filepath.Join(dir, "dropped"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	// Confined, it still does its job through the host.
	res, err := scannerByName(t, p, "echo").ScanPartition(context.Background(), nil, sampleRequest())
	require.NoError(t, err)
	assert.NotEmpty(t, res.Notes)
}

// A program that launches a plugin is non-dumpable before the plugin
// runs (Launch makes it so), which keeps even an unconfined plugin of its
// user from reading its environment (where FFSCAN_VALKEY__PASSWORD
// lives).
func TestProtectedHostEnvironmentIsUnreadable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	if os.Geteuid() == 0 {
		// root keeps CAP_SYS_PTRACE: a plugin of root reads any process
		// anyway; that is why plugins should not run as root.
		t.Skip("as root the plugin bypasses the check")
	}
	p := launchIsolated(t, pluginhost.IsolationOff)
	env := fmt.Sprintf("environ:%d", os.Getpid())
	assert.False(t, dumpable(t), "Launch made this process non-dumpable")
	assert.Contains(t, probe(t, p, env)[env], "permission denied")
}

// A confined plugin that makes a syscall of another architecture (an
// amd64 process can enter the kernel's i386 syscall table with int 0x80,
// where every number the filter checks means something else) is killed:
// a filter that let such calls through would let the plugin open any
// socket.
func TestConfinedPluginIsKilledForAForeignArchitectureSyscall(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("i386 syscalls are an amd64 matter")
	}
	free := launchIsolated(t, pluginhost.IsolationOff)
	if outcome := probe(t, free, "i386socket:")["i386socket:"]; outcome != "ok" {
		t.Skipf("this kernel runs no i386 syscalls: %s", outcome)
	}
	p := launchIsolated(t, pluginhost.IsolationAuto)
	if !strings.Contains(p.Isolation(), "seccomp") {
		t.Skipf("no seccomp filter here: %s", p.Isolation())
	}
	req := &scannerapi.ScanRequest{Scanner: "prober", Partition: keys.Partition{Family: keys.FamilyFlow},
		Candidates: []scannerapi.Candidate{{Source: "due", Member: "i386socket:"}}}
	_, err := scannerByName(t, p, "prober").ScanPartition(context.Background(), nil, req)
	require.Error(t, err, "the plugin answered: the syscall went through")
	<-p.Exited()
}
