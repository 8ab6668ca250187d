//go:build !unix

package distribution

// lockDir has no cross-process lock on this platform.
func lockDir(string) (func(), error) { return func() {}, nil }
