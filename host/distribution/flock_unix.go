//go:build unix

package distribution

import (
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on dir (the lock file's directory: the
// lock file itself is replaced by rename, so its inode cannot carry the
// lock), so two installs at once do not lose each other's lock entries.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
