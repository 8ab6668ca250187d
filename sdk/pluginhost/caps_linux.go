//go:build linux

package pluginhost

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// A host started as root would hand its plugins every capability: the
// exec of a program by uid 0 fills its permitted set from the bounding
// set, so a confined plugin could still change its user ids, override
// file permissions where Landlock lets it look, load modules or change
// the clock. The trampoline drops them all before it execs the plugin:
// it locks the rule that gives root capabilities at exec off
// (SECBIT_NOROOT), empties the bounding set (which no later exec can
// refill), clears the ambient set, and empties its own sets. The plugin
// then runs as uid 0 with no capability: it still owns root's files as
// far as Landlock lets it see them, but cannot take another user's id
// (setuid fails with EPERM) or anything else a capability guards.
// Without privileges (a host not run as root) only the ambient set can
// hold capabilities, and it is cleared; no_new_privs keeps file
// capabilities and setuid bits from granting any at exec.

// Securebits (linux/securebits.h; x/sys/unix does not name them).
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// capsDesc is what the trampoline denies beside the seccomp filter, for
// Plugin.Isolation.
const capsDesc = "no capabilities"

// dropCapabilities drops the calling thread's capabilities for good, and
// checks that none is left.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		// Securebits and the bounding set need CAP_SETPCAP, so they go
		// before the thread's own sets are emptied.
		bits := secbitNoRoot | secbitNoRootLocked | secbitKeepCapsLocked |
			secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
			return fmt.Errorf("PR_SET_SECUREBITS: %w", err)
		}
		for c := 0; ; c++ {
			err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
			if errors.Is(err, unix.EINVAL) {
				break // past the last capability the kernel knows
			}
			if err != nil {
				return fmt.Errorf("PR_CAPBSET_DROP %d: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_CAP_AMBIENT_CLEAR_ALL: %w", err)
	}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("capabilities left after dropping them: %+v", data)
		}
	}
	return nil
}
