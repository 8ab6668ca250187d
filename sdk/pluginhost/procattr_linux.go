package pluginhost

import "syscall"

// pluginProcAttr puts the plugin in its own process group (so Kill can take
// down everything it started) and has the kernel SIGKILL it when the
// launching thread dies (Pdeathsig). Go never ends a thread that was not
// locked with runtime.LockOSThread, so in practice that is the host dying;
// the plugin also watches its parent itself (see Serve).
func pluginProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
