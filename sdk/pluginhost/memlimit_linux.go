package pluginhost

import "golang.org/x/sys/unix"

// setMemoryLimit sets a process's RLIMIT_DATA (pid 0: this process).
func setMemoryLimit(pid int, limit int64) error {
	lim := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	return unix.Prlimit(pid, unix.RLIMIT_DATA, &lim, nil)
}
