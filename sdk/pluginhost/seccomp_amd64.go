//go:build linux

package pluginhost

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// archSyscalls are the allowed syscalls only amd64 has, or has under
// another name: fstatat, and the older forms a C library (a plugin built
// with cgo) and its dynamic loader use.
var archSyscalls = []string{"newfstatat", "arch_prctl", "access", "open", "stat", "lstat", "readlink", "poll", "select",
	"epoll_wait", "pipe", "dup2", "getpgrp", "alarm", "pause", "time", "unlink", "mkdir", "rename", "chmod"}
