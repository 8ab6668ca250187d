package pluginhost

import (
	"errors"
	"fmt"
	"os/exec"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startConfined starts cmd confined: through the trampoline
// (trampoline_linux.go), this very program started with the plugin's
// confinement in its environment, which applies it to itself (Landlock,
// no_new_privs, no capabilities, the seccomp allow-list, the memory
// limit) and then execs the plugin, which inherits all of it. Nothing
// of the host is confined: no thread of the host ever joins the
// plugin's Landlock domain, so the plugin can signal none of them.
//
// It returns what is enforced, or, with IsolationAuto on a kernel
// without Landlock (or one too old to deny TCP), starts cmd unconfined
// and says why. What the description promises is what the trampoline
// enforces or it refuses to exec (exit status trampolineExit, the
// reason on stderr): the ABI is decided here and checked there.
//
// spec carries the rules (paths, connect, memory, control groups to
// join); Exec, ABI and Seccomp are filled in here.
func startConfined(cmd *exec.Cmd, mode Isolation, spec sandboxSpec) (string, error) {
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
	spec.Exec, spec.ABI, spec.Seccomp = cmd.Path, abi, seccompAvailable()
	env, err := spec.env()
	if err != nil {
		return "", err
	}
	cmd.Env = append(cmd.Env, env)
	cmd.Path = trampolinePath
	if err := cmd.Start(); err != nil {
		return "", err
	}
	return spec.describe(), nil
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

// restrictSelf puts the calling thread (the trampoline's, which then
// execs the plugin) in a new Landlock domain of ABI abi: every filesystem
// access is denied but reads under readOnly and anything under
// readWrite; TCP bind and connect are denied; from ABI 6, abstract unix
// sockets and signals outside the domain are too. no_new_privs must be
// set.
func restrictSelf(abi int, readOnly, readWrite []string) error {
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
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	read := uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR)
	for _, set := range []struct {
		paths  []string
		rights uint64
	}{{readOnly, read}, {readWrite, handled}} {
		for _, p := range set.paths {
			if err := addPathRule(int(fd), p, set.rights&handled); err != nil {
				return err
			}
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// addPathRule allows rights beneath path; a path that does not exist is
// skipped (the host left out those it did not find, existingPaths).
func addPathRule(rulesetFD int, path string, rights uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= fileRights
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("landlock rule for %s: %w", path, errno)
	}
	return nil
}

// makeNonDumpable keeps other processes of the same user (plugins among
// them) from reading this process's memory and /proc/<pid>/environ.
func makeNonDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
