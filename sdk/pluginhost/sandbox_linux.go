package pluginhost

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startConfined starts cmd from an OS thread confined with Landlock (and
// no_new_privs), so that the child inherits the confinement through exec.
// Landlock applies to the calling thread and what it starts; the host
// keeps its other threads free. The thread is kept, parked, until the
// plugin exits: Pdeathsig fires when the thread that started the child
// ends. The Go runtime does not create new threads from a locked thread
// (it uses a clean template thread), so the confinement stays on this
// one.
//
// It returns a description of what was enforced, or, with IsolationAuto on
// a kernel without Landlock, starts cmd unconfined and says why.
func startConfined(cmd *exec.Cmd, mode Isolation, readOnly, readWrite []string, exited <-chan struct{}) (string, error) {
	abi, err := landlockABI()
	if err != nil || abi < 4 {
		why := "Landlock is not available"
		if err != nil {
			why += ": " + err.Error()
		} else {
			why = fmt.Sprintf("Landlock ABI %d cannot deny TCP (4 needed)", abi)
		}
		if mode == IsolationRequired {
			return "", fmt.Errorf("isolation is required but %s", why)
		}
		if err := cmd.Start(); err != nil {
			return "", err
		}
		return "none (" + why + ")", nil
	}
	noProcs := seccompAvailable()
	if noProcs {
		// Through the trampoline (seccomp_linux.go): this very program,
		// which /proc/self/exe names in the child even when its file was
		// replaced since, installs the filter and execs the plugin.
		cmd.Env = append(cmd.Env, seccompExecEnv+"="+cmd.Path)
		cmd.Path = trampolinePath
		// Opened here, the rule names this program's own file.
		readOnly = append(readOnly, trampolinePath)
	}
	type started struct {
		desc string
		err  error
	}
	ch := make(chan started, 1)
	go onLockedThread(func() {
		// The thread carries the confinement: it is never unlocked, and
		// ends with this function, once the plugin has exited.
		desc, err := confineThread(abi, readOnly, readWrite)
		if err == nil {
			err = cmd.Start()
		}
		if noProcs {
			desc += "; " + seccompDesc + "; " + capsDesc
		} else {
			desc += "; may start processes and open sockets other than TCP (the kernel offers no seccomp filter)"
		}
		ch <- started{desc, err}
		if err == nil {
			<-exited
		}
	})
	s := <-ch
	return s.desc, s.err
}

// onLockedThread runs f locked to an OS thread that is not the process's
// main thread. The main thread is the one other processes address by the
// host's pid: confined, it would share the plugin's Landlock domain, and
// the plugin could then signal the host. A goroutine that finds itself
// on the main thread keeps it locked while it starts f on another (which
// therefore cannot be the main thread), then lets it go unconfined.
func onLockedThread(f func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		f()
		return
	}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(ready)
		f()
	}()
	<-ready
	runtime.UnlockOSThread()
}

func landlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}

// Filesystem rights by the ABI that introduced them.
func fsRights(abi int) uint64 {
	r := uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM)
	if abi >= 2 {
		r |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		r |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return r
}

// The rights that apply to a file (not a directory) rule.
const fileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
	unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

// confineThread sets no_new_privs and a Landlock domain on the calling
// thread: every filesystem access is denied but reads under readOnly and
// anything under readWrite; TCP bind and connect are denied; from ABI 6,
// abstract unix sockets and signals outside the domain are too.
func confineThread(abi int, readOnly, readWrite []string) (string, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", fmt.Errorf("no_new_privs: %w", err)
	}
	handled := fsRights(abi)
	attr := unix.LandlockRulesetAttr{
		Access_fs:  handled,
		Access_net: unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP,
	}
	size := unsafe.Sizeof(attr)
	scoped := abi >= 6
	if scoped {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	} else {
		size = unsafe.Offsetof(attr.Scoped) // older kernels refuse the larger struct
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return "", fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	read := uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR)
	nr, nw := 0, 0
	for _, set := range []struct {
		paths  []string
		rights uint64
		n      *int
	}{{readOnly, read, &nr}, {readWrite, handled, &nw}} {
		for _, p := range set.paths {
			ok, err := addPathRule(int(fd), p, set.rights&handled)
			if err != nil {
				return "", err
			}
			if ok {
				*set.n++
			}
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return "", fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	desc := []string{fmt.Sprintf("landlock ABI %d", abi), fmt.Sprintf("files: read %d paths, write %d", nr, nw), "TCP bind and connect denied"}
	if scoped {
		desc = append(desc, "abstract sockets and signals scoped")
	}
	desc = append(desc, "no_new_privs")
	return strings.Join(desc, "; "), nil
}

// addPathRule allows rights beneath path; a path that does not exist is
// skipped (ok false).
func addPathRule(rulesetFD int, path string, rights uint64) (bool, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	defer unix.Close(fd)
	fi, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	if !fi.IsDir() {
		rights &= fileRights
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return false, fmt.Errorf("landlock rule for %s: %w", path, errno)
	}
	return true, nil
}

// makeNonDumpable keeps other processes of the same user (plugins among
// them) from reading this process's memory and /proc/<pid>/environ.
func makeNonDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
