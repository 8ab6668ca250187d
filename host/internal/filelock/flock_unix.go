//go:build unix

package filelock

import (
	"os"
	"syscall"
)

// hold takes an exclusive flock on f, waiting for any other holder, and
// closes f when it cannot.
func hold(f *os.File) (func(), error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
