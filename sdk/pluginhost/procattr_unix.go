//go:build unix && !linux

package pluginhost

import "syscall"

// pluginProcAttr puts the plugin in its own process group. Pdeathsig does
// not exist outside Linux; the plugin's own parent watch (see Serve) covers
// a dead host there.
func pluginProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
