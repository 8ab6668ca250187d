//go:build !linux

package pluginhost

// setMemoryLimit: the limit is set on Linux only.
func setMemoryLimit(int, int64) error { return nil }
