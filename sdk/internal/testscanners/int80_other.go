//go:build !amd64

package testscanners

import "syscall"

// i386Socket: only amd64 processes can make i386 syscalls.
func i386Socket(int, int) error { return syscall.ENOSYS }
