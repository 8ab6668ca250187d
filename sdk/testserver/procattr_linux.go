package testserver

import "syscall"

// The server gets its own process group and dies with the test binary, so a
// test killed by a timeout leaves no server behind.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
