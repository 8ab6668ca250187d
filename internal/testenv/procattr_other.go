//go:build !linux

package testenv

import "syscall"

func serverProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
