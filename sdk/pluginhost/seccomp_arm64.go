//go:build linux

package pluginhost

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

// archSyscalls: arm64 has only the *at and p* forms, all listed in
// allowedSyscalls.
var archSyscalls = []string{}
