//go:build linux && (amd64 || arm64)

package pluginhost

import (
	"fmt"
	"os"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is an allow-list: a confined plugin may make the
// syscalls a Go program serving scanners makes, measured from the
// bundled plugins and the custom-scanner example under strace
// (TestSeccompFilterAllowsWhatAGoPluginDoes and the plugins' replay
// test keep it honest), and every other syscall fails with EPERM. The
// trampoline (trampoline_linux.go) installs it in the plugin's own
// process, right before it execs the plugin, which inherits it.
//
// What the arguments are held to, and why:
//   - clone only with CLONE_THREAD: no process of its own, which could
//     outlive it in a process group of its own (clone3, whose flags live
//     in memory a filter cannot read, answers ENOSYS, and C libraries
//     fall back to clone);
//   - socket only AF_UNIX with SOCK_STREAM, and no connect at all: the
//     only sockets a plugin needs are the ones the host hands it (the
//     callback socket pair, descriptor 3) and go-plugin's listener in its
//     socket directory, which the host connects to. Landlock (below ABI
//     9) does not govern connect() to a pathname unix socket, so this is
//     what keeps a plugin off the system D-Bus, docker.sock, a Valkey
//     unixsocket or Postgres peer authentication; a stream socket never
//     connected reaches nobody, and no datagram socket, which could send
//     to a path without connecting, can be made;
//   - kill and tgkill only to its own pid (the Go runtime preempts its
//     threads with tgkill): no signal reaches another process, whatever
//     Landlock's ABI scopes;
//   - prlimit64 only on itself (pid 0 or its own): another process's
//     limits are out of reach;
//   - prctl only the operations the Go runtime and the SDK use, ioctl
//     only the terminal check;
//   - mmap never MAP_SHARED (MAP_SHARED_VALIDATE has its bit too): the
//     memory limit where no control group bounds the plugin
//     (RLIMIT_DATA) counts private mappings only, and memfd_create is
//     refused, so no memory escapes it.
//
// ptrace, process_vm_readv/writev, keyctl, bpf, userfaultfd,
// perf_event_open, unshare, setns, mount, memfd_create, execveat,
// io_uring_*, pidfd_*, and everything else not listed are refused.

// seccompDesc is what the filter enforces, for Plugin.Isolation.
const seccompDesc = "seccomp allow-list: no new processes, no sockets but unix ones (stream, never connected), signals to itself only, no shared memory, every other syscall not listed fails with EPERM"

// seccompAvailable reports whether the kernel supports seccomp filters.
func seccompAvailable() bool {
	_, err := os.Stat("/proc/sys/kernel/seccomp/actions_avail")
	return err == nil
}

// errno is the action that fails a syscall with e.
func errno(e unix.Errno) seccomp.Action {
	return seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(e))
}

// allowedSyscalls are allowed whatever their arguments. The filter
// compares a syscall's number with each in turn, in this order, on
// every syscall the plugin makes: the ones a serving plugin makes most
// come first.
var allowedSyscalls = []string{
	// The hot path: the socket pair, the scheduler, the netpoller.
	"futex", "read", "write", "recvmsg", "sendmsg", "epoll_pwait", "nanosleep", "sched_yield", "rt_sigreturn",
	// Memory (mmap below).
	"brk", "munmap", "mprotect", "mremap", "madvise", "mincore", "msync",
	// Files and descriptors: Landlock decides which files.
	"readv", "writev", "pread64", "pwrite64", "lseek", "openat", "close",
	"fstat", "statx", "fstatfs", "faccessat", "faccessat2", "readlinkat", "getdents64",
	"fcntl", "dup", "dup3", "pipe2", "ftruncate", "fsync", "fdatasync", "fadvise64", "unlinkat", "mkdirat",
	"renameat", "renameat2", "fchmod", "getcwd", "umask", "copy_file_range", "splice", "sendfile", "eventfd2",
	// Polling and waiting.
	"epoll_create1", "epoll_ctl", "epoll_pwait2", "ppoll", "pselect6",
	"clock_nanosleep", "restart_syscall",
	// Time.
	"clock_gettime", "clock_getres", "gettimeofday", "timer_create", "timer_settime", "timer_gettime",
	"timer_delete", "setitimer", "getitimer",
	// Signals (to itself: kill and tgkill below).
	"rt_sigaction", "rt_sigprocmask", "sigaltstack", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigpending",
	// The process itself.
	"exit", "exit_group", "getpid", "gettid", "getppid", "getpgid", "getsid", "getuid", "geteuid", "getgid", "getegid",
	"getgroups", "getresuid", "getresgid", "capget", "uname", "sysinfo", "getrusage", "times", "getrandom",
	"sched_getaffinity", "getcpu", "set_tid_address", "set_robust_list", "rseq", "membarrier", "getrlimit",
	// The trampoline's exec of the plugin (of what Landlock lets it run).
	"execve",
	// Sockets it was handed or made (socket itself below; no connect).
	"bind", "listen", "accept", "accept4", "getsockname", "getpeername", "setsockopt", "getsockopt",
	"recvfrom", "sendto", "recvmmsg", "sendmmsg", "shutdown",
}

// prctlOps are the prctl operations a plugin may use: the Go runtime
// names memory mappings (PR_SET_VMA) and reads its no_new_privs and
// seccomp state; the SDK asks for a signal at its parent's death;
// threads are named.
var prctlOps = []uint64{
	unix.PR_SET_PDEATHSIG, unix.PR_GET_PDEATHSIG, unix.PR_SET_NAME, unix.PR_GET_NAME, unix.PR_SET_VMA,
	unix.PR_GET_NO_NEW_PRIVS, unix.PR_GET_SECCOMP, unix.PR_GET_DUMPABLE, unix.PR_CAPBSET_READ, unix.PR_GET_SECUREBITS,
	unix.PR_GET_TIMERSLACK, unix.PR_GET_THP_DISABLE,
}

// processPolicy is the allow-list for a plugin whose pid is pid (exec
// keeps the pid, so the trampoline's is the plugin's). connect adds
// connect(), for the callback paths of older plugins, which dial the
// host's go-plugin broker in their socket directory (LaunchConfig's
// CallbackStream and CallbackUnary; never on the default path).
func processPolicy(pid int, connect bool) seccomp.Policy {
	is := func(arg uint32, v uint64) seccomp.Condition {
		return seccomp.Condition{Argument: arg, Operation: seccomp.Equal, Value: v}
	}
	self := uint64(pid)
	conds := []seccomp.NameWithConditions{
		// No shared mapping: RLIMIT_DATA (plugin_memory_limit without a
		// control group) counts private writable memory only, so a shared
		// anonymous mapping, or one of a file in its directory, would
		// hold memory past the limit. The Go runtime maps only private
		// memory.
		{Name: "mmap", Conditions: seccomp.ArgumentConditions{{Argument: 3, Operation: seccomp.BitsNotSet, Value: unix.MAP_SHARED}}},
		{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD}}},
		{Name: "socketpair", Conditions: seccomp.ArgumentConditions{is(0, unix.AF_UNIX)}},
		{Name: "kill", Conditions: seccomp.ArgumentConditions{is(0, self)}},
		{Name: "tgkill", Conditions: seccomp.ArgumentConditions{is(0, self)}},
		{Name: "prlimit64", Conditions: seccomp.ArgumentConditions{is(0, 0)}},
		{Name: "prlimit64", Conditions: seccomp.ArgumentConditions{is(0, self)}},
	}
	for _, flags := range []uint64{0, unix.SOCK_NONBLOCK, unix.SOCK_CLOEXEC, unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC} {
		conds = append(conds, seccomp.NameWithConditions{Name: "socket",
			Conditions: seccomp.ArgumentConditions{is(0, unix.AF_UNIX), is(1, unix.SOCK_STREAM|flags)}})
	}
	// ioctl only asks whether a descriptor is a terminal (hclog on
	// stderr): nothing that reaches a device, and no TIOCSTI into a
	// terminal it inherited.
	conds = append(conds, seccomp.NameWithConditions{Name: "ioctl", Conditions: seccomp.ArgumentConditions{is(1, unix.TCGETS)}})
	for _, op := range prctlOps {
		conds = append(conds, seccomp.NameWithConditions{Name: "prctl", Conditions: seccomp.ArgumentConditions{is(0, op)}})
	}
	names := append(append([]string{}, allowedSyscalls...), archSyscalls...)
	if connect {
		names = append(names, "connect")
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionErrno, // EPERM: the library fills in its errno
		Syscalls: []seccomp.SyscallGroup{
			{Names: names, Action: seccomp.ActionAllow},
			{NamesWithCondtions: conds, Action: seccomp.ActionAllow},
			{Names: []string{"clone3"}, Action: errno(unix.ENOSYS)},
		},
	}
}

// processFilter is processPolicy compiled to BPF, behind a guard that
// kills a process making a syscall of another architecture (an amd64
// process can still enter the kernel's i386 entry with int 0x80, where
// every number means something else).
func processFilter(pid int, connect bool) ([]bpf.Instruction, error) {
	policy := processPolicy(pid, connect)
	prog, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}
	return append(guard, prog...), nil
}

// installFilter installs processFilter on the calling thread (the one
// that execs the plugin). no_new_privs must be set.
func installFilter(connect bool) error {
	insts, err := processFilter(os.Getpid(), connect)
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return err
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("PR_SET_SECCOMP: %w", err)
	}
	return nil
}
