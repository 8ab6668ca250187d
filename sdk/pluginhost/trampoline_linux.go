//go:build linux

package pluginhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A confined plugin is started through a trampoline: the launching
// program itself (every program that launches plugins links this
// package; /proc/self/exe names it even when its file was replaced
// since), run with sandboxEnv set. Its init (below) confines its own
// process and execs the plugin, which inherits the confinement.
//
// Confinement happens there, in the plugin's process, and nowhere else:
// a Landlock domain applied to a host thread that starts a plugin puts
// that host thread in the plugin's domain, where Landlock's signal
// scoping lets the plugin signal it (a SIGSTOP to it freezes the whole
// host); a seccomp filter cannot be installed between fork and exec from
// Go. Only the thread that execs matters: the kernel gives the new
// program that thread's Landlock domain, no_new_privs, capabilities and
// seccomp filter, and ends every other thread.

// sandboxEnv carries the plugin's sandboxSpec to the trampoline.
const sandboxEnv = "FFSCAN_SANDBOX"

// trampolineExit is the trampoline's exit status when it cannot confine
// or exec the plugin (its reason is on stderr, which the host logs).
const trampolineExit = 111

// sandboxSpec is what the trampoline enforces before it execs the
// plugin; the host decides it (startConfined) and describes it
// (describe) from the same values.
type sandboxSpec struct {
	// Exec is the plugin's executable.
	Exec string `json:"exec"`
	// ABI is the Landlock ABI to apply (the kernel's, as the host read
	// it; at least 4).
	ABI int `json:"abi"`
	// ReadOnly and ReadWrite are the paths the plugin may read (and
	// execute), and also write.
	ReadOnly  []string `json:"ro"`
	ReadWrite []string `json:"rw"`
	// Seccomp installs the allow-list filter (Linux amd64 and arm64);
	// Connect adds connect() to it, for the callback paths of older
	// plugins (processPolicy).
	Seccomp bool `json:"seccomp"`
	Connect bool `json:"connect,omitempty"`
	// Memory, if positive, is the plugin's RLIMIT_DATA in bytes.
	Memory int64 `json:"memory,omitempty"`
	// Cgroups are the cgroup.procs files of the plugin's control group
	// (one per hierarchy), joined first: the plugin runs no instruction
	// outside its bounds.
	Cgroups []string `json:"cgroups,omitempty"`
}

func (s sandboxSpec) env() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("sandbox spec: %w", err)
	}
	return sandboxEnv + "=" + string(b), nil
}

// describe says what the trampoline enforces, for Plugin.Isolation.
func (s sandboxSpec) describe() string {
	nr, nw := len(existingPaths(s.ReadOnly)), len(existingPaths(s.ReadWrite))
	desc := []string{"confined in its own process", fmt.Sprintf("landlock ABI %d", s.ABI),
		fmt.Sprintf("files: read %d paths, write %d", nr, nw), "TCP bind and connect denied"}
	if s.ABI >= 6 {
		desc = append(desc, "abstract sockets and signals scoped")
	}
	desc = append(desc, "no_new_privs", capsDesc)
	if s.Seccomp {
		desc = append(desc, seccompDesc)
		if s.Connect {
			desc = append(desc, "but connect() allowed (an older plugin's callback path: it dials the host's broker)")
		}
	} else {
		desc = append(desc, "may start processes and open sockets other than TCP (the kernel offers no seccomp filter here)")
	}
	return strings.Join(desc, "; ")
}

// existingPaths are the paths that exist: the rules for the others are
// skipped (a system without /lib32, say).
func existingPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func init() {
	raw, ok := os.LookupEnv(sandboxEnv)
	if !ok {
		return
	}
	// init runs on the main thread with the main goroutine locked to
	// it; lock explicitly anyway: everything below is per thread, and
	// the thread that confines itself must be the one that execs.
	runtime.LockOSThread()
	os.Unsetenv(sandboxEnv)
	var spec sandboxSpec
	err := json.Unmarshal([]byte(raw), &spec)
	if err == nil {
		err = spec.apply()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ffscan sandbox: cannot confine the plugin: %v\n", err)
		os.Exit(trampolineExit)
	}
	err = syscall.Exec(spec.Exec, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "ffscan sandbox: exec %s: %v\n", spec.Exec, err)
	os.Exit(trampolineExit)
}

// apply confines the calling thread, in an order where each step still
// has what it needs: the control group first (joining it writes a file
// Landlock will not let it reach, and with the capabilities of the
// host's user), capabilities next (securebits and the bounding
// set need CAP_SETPCAP), no_new_privs before Landlock (which needs it
// without CAP_SYS_ADMIN), Landlock before the seccomp filter (whose
// allow-list has no landlock_* syscall), and the memory limit last
// (this program may map more than the plugin may).
func (s sandboxSpec) apply() error {
	if s.Exec == "" || s.ABI < 4 {
		return errors.New("incomplete sandbox spec")
	}
	if err := joinCgroups(s.Cgroups, os.Getpid()); err != nil {
		return fmt.Errorf("control group: %w", err)
	}
	if abi, err := landlockABI(); err != nil || abi < s.ABI {
		return fmt.Errorf("the host planned Landlock ABI %d, the kernel offers %d (%v)", s.ABI, abi, err)
	}
	if err := dropCapabilities(); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := restrictSelf(s.ABI, s.ReadOnly, s.ReadWrite); err != nil {
		return err
	}
	if s.Seccomp {
		if err := installFilter(s.Connect); err != nil {
			return fmt.Errorf("seccomp filter: %w", err)
		}
	}
	if s.Memory > 0 {
		if err := setMemoryLimit(0, s.Memory); err != nil {
			return fmt.Errorf("memory limit %d: %w", s.Memory, err)
		}
	}
	return nil
}
