// Package filelock takes the exclusive advisory locks (flock) that hosts
// sharing a file on one machine hold around a read-modify-write of it, so
// that no host loses another's update.
package filelock

import "os"

// File locks the file at path, created (0600) if missing. The lock is
// released by the returned function.
func File(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	return hold(f)
}

// Dir locks the directory dir itself: for a file that is replaced by
// rename, whose inode cannot carry the lock across the replacement.
func Dir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return hold(f)
}
