//go:build linux

package pluginhost

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

// forkSyscalls: arm64 has no fork or vfork; clone and clone3 are all.
var forkSyscalls = []string{}
