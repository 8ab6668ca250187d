package testscanners

import "syscall"

// int80 makes an i386 syscall from this amd64 process (int 0x80); it
// returns the result or -errno.
func int80(trap, a1, a2, a3 uintptr) (r uintptr)

// i386Socket opens a socket through the i386 syscall table, whose
// numbers a seccomp filter written for amd64 does not know: socket is
// 359 there.
func i386Socket(family, typ int) error {
	r := int(int80(359, uintptr(family), uintptr(typ), 0))
	if r < 0 {
		return syscall.Errno(-r)
	}
	return syscall.Close(r)
}
