//go:build linux

package pluginhost

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// forkSyscalls are the process-creating syscalls besides clone and clone3.
var forkSyscalls = []string{"fork", "vfork"}
