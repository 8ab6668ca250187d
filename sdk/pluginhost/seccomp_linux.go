//go:build linux && (amd64 || arm64)

package pluginhost

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A confined plugin may not start processes: one it started could
// outlive it (a double fork escapes any process group), and the host
// could neither see nor stop it. Nor may it open a socket of any family
// but AF_UNIX: it needs only the ones the host hands it (the callback
// socket pair, go-plugin's unix sockets), and Landlock's network rules
// cover TCP only (an MPTCP socket, UDP, raw and netlink sockets pass
// them). The kernel offers no way to install a seccomp filter in a child
// between fork and exec from Go, and a filter on the launching thread
// would refuse the host's own fork, so the plugin is started through a
// trampoline: the launching program itself (every program that launches
// plugins links this package) runs with seccompExecEnv set, installs the
// filter in init (after dropping capabilities, caps_linux.go), and execs
// the plugin, which inherits it. Threads (clone with CLONE_THREAD) stay
// allowed.

// seccompExecEnv names the plugin the trampoline execs.
const seccompExecEnv = "FFSCAN_SANDBOX_EXEC"

// trampolineExit is the trampoline's exit status when it cannot confine
// or exec the plugin (its reason is on stderr, which the host logs).
const trampolineExit = 111

func init() {
	target, ok := os.LookupEnv(seccompExecEnv)
	if !ok {
		return
	}
	// init runs on the main thread with the main goroutine locked to
	// it; lock explicitly anyway: the filter is per thread, and the
	// thread that installs it must be the one that execs.
	runtime.LockOSThread()
	os.Unsetenv(seccompExecEnv)
	limit, limited := os.LookupEnv(memoryLimitEnv)
	os.Unsetenv(memoryLimitEnv)
	if err := dropCapabilities(); err != nil {
		fmt.Fprintf(os.Stderr, "ffscan sandbox: cannot drop capabilities: %v\n", err)
		os.Exit(trampolineExit)
	}
	if err := installFilter(); err != nil {
		fmt.Fprintf(os.Stderr, "ffscan sandbox: cannot install the seccomp filter: %v\n", err)
		os.Exit(trampolineExit)
	}
	argv, env := os.Args, os.Environ()
	if limited {
		// Last, right before the exec: the limit is the plugin's, and
		// this program (the host's, a test binary built with the race
		// detector included) may map more than the plugin may.
		n, err := strconv.ParseInt(limit, 10, 64)
		if err == nil {
			err = setMemoryLimit(0, n)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "ffscan sandbox: cannot set the memory limit %q: %v\n", limit, err)
			os.Exit(trampolineExit)
		}
	}
	err := syscall.Exec(target, argv, env)
	fmt.Fprintf(os.Stderr, "ffscan sandbox: exec %s: %v\n", target, err)
	os.Exit(trampolineExit)
}

// seccompAvailable reports whether the kernel supports seccomp filters.
func seccompAvailable() bool {
	_, err := os.Stat("/proc/sys/kernel/seccomp/actions_avail")
	return err == nil
}

// seccompDesc is what the filter denies, for Plugin.Isolation.
const seccompDesc = "no new processes, no sockets but unix ones (seccomp)"

// errno is the action that fails a syscall with e.
func errno(e unix.Errno) seccomp.Action {
	return seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(e))
}

// processPolicy is what a confined plugin may not do: start a process
// (fork, vfork, clone without CLONE_THREAD; clone3, whose flags live in
// memory a filter cannot read, answers ENOSYS so that callers fall back
// to clone), open a socket of another family than AF_UNIX (socket,
// socketpair), get one another way (io_uring can open sockets;
// pidfd_getfd takes another process's descriptors), everything else
// allowed. Denials fail with EPERM, as a permission check would.
func processPolicy() seccomp.Policy {
	notUnix := seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{
				Names:  append([]string{"io_uring_setup", "io_uring_enter", "io_uring_register", "pidfd_getfd"}, forkSyscalls...),
				Action: errno(unix.EPERM),
			},
			{Names: []string{"clone3"}, Action: errno(unix.ENOSYS)},
			{
				NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD}}},
					{Name: "socket", Conditions: notUnix},
					{Name: "socketpair", Conditions: notUnix},
				},
				Action: errno(unix.EPERM),
			},
		},
	}
}

// processFilter is processPolicy compiled to BPF, behind a guard that
// kills a process making a syscall of another architecture (an amd64
// process can still enter the kernel's i386 entry with int 0x80): the
// library sends those to the policy's default action, which for a policy
// that lists what it denies is "allow", so every rule above would be
// bypassed by the same syscall under its i386 number.
func processFilter() ([]bpf.Instruction, error) {
	policy := processPolicy()
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

// installFilter installs processFilter on the calling thread. It needs
// no_new_privs, which the launching thread set and fork and exec kept.
func installFilter() error {
	insts, err := processFilter()
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
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("PR_SET_SECCOMP: %w", err)
	}
	return nil
}
