//go:build linux

package pluginhost

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

// archSyscalls: arm64 has only the *at and p* forms, the others listed
// in allowedSyscalls; fstatat is amd64's newfstatat.
var archSyscalls = []string{"fstatat"}
