//go:build unix

package pluginhost

import (
	"errors"
	"syscall"
)

// killGroup SIGKILLs the process group led by pid (the plugin and anything
// it started that stayed in its group).
func killGroup(pid int) error {
	if pid <= 0 {
		return nil
	}
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
