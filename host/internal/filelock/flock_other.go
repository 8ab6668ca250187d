//go:build !unix

package filelock

import "os"

// hold has no cross-process lock on this platform: the callers' own
// in-process mutexes are all there is.
func hold(f *os.File) (func(), error) {
	return func() { f.Close() }, nil
}
