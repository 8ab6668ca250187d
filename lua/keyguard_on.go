//go:build ffscan_keyguard

package lua

// Built with -tags ffscan_keyguard (make test does): the loader serves the
// key-guarded library.
func init() { keyGuardBuild = true }
