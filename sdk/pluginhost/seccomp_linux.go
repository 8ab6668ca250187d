//go:build linux && (amd64 || arm64)

package pluginhost

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A confined plugin may not start processes: one it started could
// outlive it (a double fork escapes any process group), and the host
// could neither see nor stop it. The kernel offers no way to install a
// seccomp filter in a child between fork and exec from Go, and a filter on
// the launching thread would refuse the host's own fork, so the plugin is
// started through a trampoline: the launching program itself (every
// program that launches plugins links this package) runs with
// seccompExecEnv set, installs the filter in init, and execs the plugin,
// which inherits it. Threads (clone with CLONE_THREAD) stay allowed.

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
	if err := denyProcessCreation(); err != nil {
		fmt.Fprintf(os.Stderr, "ffscan sandbox: cannot install the seccomp filter: %v\n", err)
		os.Exit(trampolineExit)
	}
	err := syscall.Exec(target, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "ffscan sandbox: exec %s: %v\n", target, err)
	os.Exit(trampolineExit)
}

// seccompAvailable reports whether the kernel supports seccomp filters.
func seccompAvailable() bool {
	_, err := os.Stat("/proc/sys/kernel/seccomp/actions_avail")
	return err == nil
}

// BPF over struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its
// low 32 bits on these little-endian architectures).
const (
	offNr    = 0
	offArch  = 4
	offArg0  = 16
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	// clone3 passes its flags in memory a filter cannot read: ENOSYS
	// makes callers fall back to clone, whose flags it can.
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
)

// processFilter refuses fork, vfork, clone3 and clone without
// CLONE_THREAD, and kills a process that makes syscalls of another
// architecture (which would bypass the numbers checked).
func processFilter() []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	prog := []unix.SockFilter{
		stmt(ld, offArch),
		jump(jeq, auditArch, 1, 0),
		stmt(ret, retKill),
		stmt(ld, offNr),
		// x32 syscalls on amd64 carry bit 30; nothing of ours uses them.
		jump(jge, 0x40000000, 0, 1),
		stmt(ret, retEPERM),
		jump(jeq, unix.SYS_CLONE3, 0, 1),
		stmt(ret, retENOSYS),
		jump(jeq, unix.SYS_CLONE, 0, 4),
		stmt(ld, offArg0),
		jump(jset, unix.CLONE_THREAD, 0, 1),
		stmt(ret, retAllow),
		stmt(ret, retEPERM),
	}
	for _, nr := range forkSyscalls {
		prog = append(prog, jump(jeq, uint32(nr), 0, 1), stmt(ret, retEPERM))
	}
	return append(prog, stmt(ret, retAllow))
}

// denyProcessCreation installs processFilter on the calling thread. It
// needs no_new_privs, which the launching thread set and fork and exec
// kept.
func denyProcessCreation() error {
	prog := processFilter()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("PR_SET_SECCOMP: %w", err)
	}
	return nil
}
