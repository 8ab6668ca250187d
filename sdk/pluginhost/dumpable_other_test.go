//go:build !linux

package pluginhost_test

import "testing"

// dumpable: only Linux makes a process non-dumpable (the test using it
// skips elsewhere).
func dumpable(*testing.T) bool { return true }
