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
	"strings"
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

// The filter's verdicts on what a confined plugin may and may not do:
// an allow-list, so everything not listed, the dangerous syscalls among
// them, fails with EPERM.
func TestSeccompFilterVerdicts(t *testing.T) {
	threads := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_SYSVSEM | unix.CLONE_THREAD)
	self := uint64(pluginhost.SeccompTestPid)
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
		{"a unix stream socket", "socket", [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK}, retAllow},
		{"a unix datagram socket (sendto a path)", "socket", [6]uint64{unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC}, retEPERM},
		{"a unix seqpacket socket", "socket", [6]uint64{unix.AF_UNIX, unix.SOCK_SEQPACKET}, retEPERM},
		{"a unix socket pair", "socketpair", [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"TCP", "socket", [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, retEPERM},
		{"multipath TCP", "socket", [6]uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, retEPERM},
		{"UDP over IPv6", "socket", [6]uint64{unix.AF_INET6, unix.SOCK_DGRAM}, retEPERM},
		{"netlink", "socket", [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW}, retEPERM},
		{"packet", "socket", [6]uint64{unix.AF_PACKET, unix.SOCK_RAW}, retEPERM},
		{"vsock", "socket", [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, retEPERM},
		{"AF_UNIX in the low word only", "socket", [6]uint64{1<<32 | unix.AF_UNIX, unix.SOCK_STREAM}, retEPERM},
		{"an inet socket pair", "socketpair", [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, retEPERM},
		{"connect (to any socket, pathname or abstract)", "connect", [6]uint64{3}, retEPERM},
		{"an io_uring (it opens sockets)", "io_uring_setup", [6]uint64{8}, retEPERM},
		{"another process's descriptor", "pidfd_getfd", [6]uint64{}, retEPERM},
		{"ptrace", "ptrace", [6]uint64{unix.PTRACE_SEIZE, 1}, retEPERM},
		{"process_vm_readv", "process_vm_readv", [6]uint64{1}, retEPERM},
		{"process_vm_writev", "process_vm_writev", [6]uint64{1}, retEPERM},
		{"keyctl", "keyctl", [6]uint64{}, retEPERM},
		{"bpf", "bpf", [6]uint64{}, retEPERM},
		{"userfaultfd", "userfaultfd", [6]uint64{}, retEPERM},
		{"perf_event_open", "perf_event_open", [6]uint64{}, retEPERM},
		{"unshare", "unshare", [6]uint64{unix.CLONE_NEWUSER}, retEPERM},
		{"setns", "setns", [6]uint64{}, retEPERM},
		{"mount", "mount", [6]uint64{}, retEPERM},
		{"memfd_create", "memfd_create", [6]uint64{}, retEPERM},
		{"execveat (of a memfd)", "execveat", [6]uint64{}, retEPERM},
		{"setuid", "setuid", [6]uint64{65534}, retEPERM},
		{"a signal to itself", "kill", [6]uint64{self, uint64(unix.SIGURG)}, retAllow},
		{"a signal to another process", "kill", [6]uint64{1, uint64(unix.SIGSTOP)}, retEPERM},
		{"a signal to a process group", "kill", [6]uint64{uint64(0xffffffffffffffff), uint64(unix.SIGKILL)}, retEPERM},
		{"a signal to its own thread", "tgkill", [6]uint64{self, self + 1, uint64(unix.SIGURG)}, retAllow},
		{"a signal to another process's thread", "tgkill", [6]uint64{self - 1, self - 1, 0}, retEPERM},
		{"tkill (no process named)", "tkill", [6]uint64{self}, retEPERM},
		{"its own limits", "prlimit64", [6]uint64{0, unix.RLIMIT_NOFILE}, retAllow},
		{"another process's limits", "prlimit64", [6]uint64{1, unix.RLIMIT_NOFILE}, retEPERM},
		{"naming a mapping", "prctl", [6]uint64{unix.PR_SET_VMA}, retAllow},
		{"becoming traceable by anyone", "prctl", [6]uint64{unix.PR_SET_PTRACER}, retEPERM},
		{"a terminal check", "ioctl", [6]uint64{2, unix.TCGETS}, retAllow},
		{"typing into a terminal", "ioctl", [6]uint64{0, unix.TIOCSTI}, retEPERM},
		{"private memory", "mmap", [6]uint64{0, 1 << 20, unix.PROT_READ | unix.PROT_WRITE, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS}, retAllow},
		{"shared memory (past RLIMIT_DATA)", "mmap", [6]uint64{0, 1 << 20, unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED | unix.MAP_ANONYMOUS}, retEPERM},
		{"shared memory, validated", "mmap", [6]uint64{0, 1 << 20, unix.PROT_READ, unix.MAP_SHARED_VALIDATE}, retEPERM},
		{"read", "read", [6]uint64{0}, retAllow},
		{"exec (of what Landlock lets it run)", "execve", [6]uint64{}, retAllow},
	}
	if pluginhost.AuditArch == unix.AUDIT_ARCH_X86_64 {
		for _, nr := range []string{"fork", "vfork"} {
			cases = append(cases, struct {
				what string
				nr   string
				args [6]uint64
				want uint32
			}{nr, nr, [6]uint64{}, retEPERM})
		}
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

// traced is one syscall of a trace: its name and arguments.
type traced struct {
	name string
	args [6]uint64
}

// The filter is checked against the syscalls a Go plugin actually makes:
// the test plugin runs under strace (unconfined) through a launch, Info,
// Configure, a scan with callbacks, a backlog sample and a graceful stop,
// and every syscall it made, with its arguments, must pass the filter
// built for its pid. A Go release that starts using a syscall the filter
// refuses fails here rather than in a confined plugin in production.
func TestSeccompFilterAllowsWhatAGoPluginDoes(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv("FFSCAN_TEST_REQUIRE_STRACE") != "" {
			t.Fatal("strace is not installed (FFSCAN_TEST_REQUIRE_STRACE is set)")
		}
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

	pid, calls := ReadTrace(t, trace)
	CheckTraceAgainstFilter(t, pid, calls)
}

// CheckTraceAgainstFilter asserts that the filter for a plugin of pid
// allows every call (clone3 answers ENOSYS: glibc starts threads with
// it, and falls back to clone with CLONE_THREAD, which the filter
// allows).
func CheckTraceAgainstFilter(t *testing.T, pid int, calls map[traced]bool) {
	t.Helper()
	require.NotEmpty(t, calls)
	names := map[string]bool{}
	for c := range calls {
		want := uint32(retAllow)
		if c.name == "clone3" {
			want = retNOSYS
		}
		got, err := pluginhost.SeccompVerdictFor(pid, sysno(t, c.name), pluginhost.AuditArch, c.args)
		require.NoError(t, err)
		assert.Equal(t, want, got, "the plugin made %s(%#x, %#x, %#x, ...): the filter answers %#x, want %#x", c.name, c.args[0], c.args[1], c.args[2], got, want)
		names[c.name] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	t.Logf("%d distinct syscalls (%d with their arguments) checked: %v", len(sorted), len(calls), sorted)
}

var traceLine = regexp.MustCompile(`^(\d+)\s+([a-z0-9_]+)\(([^)]*)`)

// ReadTrace returns the pid of the traced program (the first line's)
// and the distinct syscalls of an strace -f -e raw=all log. The trace
// starts with strace's exec of the plugin, which the filter never sees
// (it is installed before that exec).
func ReadTrace(t *testing.T, path string) (int, map[traced]bool) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[traced]bool{}
	pid := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := traceLine.FindStringSubmatch(sc.Text())
		if m == nil || strings.Contains(sc.Text(), "resumed>") {
			continue // a resumed call, a signal, an exit
		}
		if pid == 0 {
			pid, err = strconv.Atoi(m[1])
			require.NoError(t, err)
		}
		c := traced{name: m[2]}
		for i, a := range strings.Split(m[3], ", ") {
			a = strings.TrimSpace(strings.TrimSuffix(a, " <unfinished ..."))
			if i >= len(c.args) || a == "" {
				break
			}
			v, err := strconv.ParseUint(a, 0, 64)
			if err != nil {
				break // a truncated or non-numeric argument: keep the ones before
			}
			c.args[i] = v
		}
		out[c] = true
	}
	require.NoError(t, sc.Err())
	return pid, out
}
