//go:build linux && (amd64 || arm64)

package pluginhost_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	seccompArch "github.com/elastic/go-seccomp-bpf/arch"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func sysno(t *testing.T, name string) uint32 {
	t.Helper()
	info, err := seccompArch.GetInfo("")
	require.NoError(t, err)
	nr, ok := info.SyscallNames[name]
	require.True(t, ok, "no syscall %s on this architecture", name)
	return uint32(nr)
}

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retNOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
)

// The filter's verdicts on what a confined plugin may and may not do.
func TestSeccompFilterVerdicts(t *testing.T) {
	threads := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_SYSVSEM | unix.CLONE_THREAD)
	cases := []struct {
		what string
		nr   string
		args [6]uint64
		want uint32
	}{
		{"a thread", "clone", [6]uint64{threads}, retAllow},
		{"a process", "clone", [6]uint64{uint64(unix.SIGCHLD)}, retEPERM},
		{"a process sharing memory", "clone", [6]uint64{uint64(unix.CLONE_VM | unix.CLONE_VFORK | unix.SIGCHLD)}, retEPERM},
		{"clone3 (flags out of reach)", "clone3", [6]uint64{}, retNOSYS},
		{"a unix socket", "socket", [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, retAllow},
		{"a unix socket pair", "socketpair", [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"TCP", "socket", [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, retEPERM},
		{"multipath TCP", "socket", [6]uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, retEPERM},
		{"UDP over IPv6", "socket", [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM}, retEPERM},
		{"netlink", "socket", [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW}, retEPERM},
		{"packet", "socket", [6]uint64{unix.AF_PACKET, unix.SOCK_RAW}, retEPERM},
		{"vsock", "socket", [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, retEPERM},
		{"AF_UNIX in the low word only", "socket", [6]uint64{1<<32 | unix.AF_UNIX, unix.SOCK_STREAM}, retEPERM},
		{"an inet socket pair", "socketpair", [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, retEPERM},
		{"an io_uring (it opens sockets)", "io_uring_setup", [6]uint64{8}, retEPERM},
		{"io_uring_enter", "io_uring_enter", [6]uint64{}, retEPERM},
		{"io_uring_register", "io_uring_register", [6]uint64{}, retEPERM},
		{"another process's descriptor", "pidfd_getfd", [6]uint64{}, retEPERM},
		{"connect", "connect", [6]uint64{3}, retAllow},
		{"read", "read", [6]uint64{0}, retAllow},
		{"exec (of what Landlock lets it run)", "execve", [6]uint64{}, retAllow},
	}
	if pluginhost.AuditArch == unix.AUDIT_ARCH_X86_64 {
		cases = append(cases,
			struct {
				what string
				nr   string
				args [6]uint64
				want uint32
			}{"fork", "fork", [6]uint64{}, retEPERM},
			struct {
				what string
				nr   string
				args [6]uint64
				want uint32
			}{"vfork", "vfork", [6]uint64{}, retEPERM})
	}
	for _, c := range cases {
		got, err := pluginhost.SeccompVerdict(sysno(t, c.nr), pluginhost.AuditArch, c.args)
		require.NoError(t, err, c.what)
		assert.Equal(t, c.want, got, "%s: %s(%#x, ...) gives %#x, want %#x", c.what, c.nr, c.args[0], got, c.want)
	}
	// A syscall of another architecture (i386's socketcall and socket
	// through int 0x80) kills the process: every number above means
	// something else there.
	for _, nr := range []uint32{102, 359, 0} {
		got, err := pluginhost.SeccompVerdict(nr, unix.AUDIT_ARCH_I386, [6]uint64{unix.AF_INET})
		require.NoError(t, err)
		assert.Equal(t, uint32(retKill), got, "i386 syscall %d", nr)
	}
	if pluginhost.AuditArch == unix.AUDIT_ARCH_X86_64 {
		// x32 numbers (bit 30) are refused as unknown.
		got, err := pluginhost.SeccompVerdict(0x40000000|sysno(t, "socket"), pluginhost.AuditArch, [6]uint64{unix.AF_INET})
		require.NoError(t, err)
		assert.Equal(t, uint32(retNOSYS), got, "x32 socket")
	}
}

// traced is one syscall of a trace: its name and first argument.
type traced struct {
	name string
	arg0 uint64
}

// The filter is checked against the syscalls a Go plugin actually makes:
// the test plugin runs under strace (unconfined) through a launch, Info,
// Configure, a scan with callbacks, a backlog sample and a graceful stop,
// and every syscall it made, with its first argument, must pass the
// filter. A Go release that starts using a syscall the filter refuses
// fails here rather than in a confined plugin in production.
func TestSeccompFilterAllowsWhatAGoPluginDoes(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed: cannot record the syscalls a plugin makes")
	}
	trace := filepath.Join(t.TempDir(), "trace")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := pluginhost.Launch(ctx, pluginhost.LaunchConfig{
		Path:         strace,
		Args:         []string{"-f", "-qq", "-e", "raw=all", "-o", trace, "--", testPlugin(t)},
		Callbacks:    &echoCallbacks{},
		StartTimeout: 30 * time.Second,
		Logger:       hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Warn, Output: os.Stderr}),
	})
	if err != nil && ctx.Err() == nil {
		// ptrace may be refused (a container without CAP_SYS_PTRACE).
		t.Skipf("cannot run the plugin under strace: %v", err)
	}
	require.NoError(t, err)
	echo := scannerByName(t, p, "echo")
	require.NoError(t, echo.Configure(ctx, map[string]string{"prefix": "x"}))
	_, err = echo.ScanPartition(ctx, nil, sampleRequest())
	require.NoError(t, err)
	_, err = echo.(scannerapi.BacklogSampler).SampleBacklog(ctx, nil, []keys.Partition{{Family: keys.FamilyFlow, Index: 1}})
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx))
	<-p.Exited()

	calls := readTrace(t, trace)
	require.NotEmpty(t, calls)
	names := map[string]bool{}
	for c := range calls {
		want := uint32(retAllow)
		if c.name == "clone3" {
			// glibc starts threads with clone3 (a plugin built with cgo
			// has them) and falls back to clone with CLONE_THREAD on
			// ENOSYS, which the filter allows (TestSeccompFilterVerdicts).
			want = retNOSYS
		}
		got, err := pluginhost.SeccompVerdict(sysno(t, c.name), pluginhost.AuditArch, [6]uint64{c.arg0})
		require.NoError(t, err)
		assert.Equal(t, want, got, "the plugin made %s(%#x, ...): the filter answers %#x, want %#x", c.name, c.arg0, got, want)
		names[c.name] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	t.Logf("%d distinct syscalls (%d with their first argument) checked: %v", len(sorted), len(calls), sorted)
}

var traceLine = regexp.MustCompile(`^\d+\s+([a-z0-9_]+)\(((?:0x)?[0-9a-f]*)`)

// readTrace returns the distinct syscalls of an strace -e raw=all log.
// The trace starts with strace's exec of the plugin, which the filter
// never sees (it is installed before that exec).
func readTrace(t *testing.T, path string) map[traced]bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[traced]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := traceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // a resumed call, a signal, an exit
		}
		var arg0 uint64
		if m[2] != "" {
			arg0, err = strconv.ParseUint(m[2], 0, 64)
			require.NoError(t, err, "argument in %q", sc.Text())
		}
		out[traced{m[1], arg0}] = true
	}
	require.NoError(t, sc.Err())
	return out
}
