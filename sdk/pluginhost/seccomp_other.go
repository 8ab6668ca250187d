//go:build !linux || !(amd64 || arm64)

package pluginhost

import "errors"

// seccompAvailable: the seccomp filter is built for Linux on amd64 and
// arm64 only.
func seccompAvailable() bool { return false }

const seccompDesc = ""

func installFilter(bool) error { return errors.New("no seccomp filter is built for this platform") }
