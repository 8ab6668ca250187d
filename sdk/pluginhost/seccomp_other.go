//go:build !linux || !(amd64 || arm64)

package pluginhost

// seccompExecEnv is unused where no seccomp filter is installed.
const seccompExecEnv = "FFSCAN_SANDBOX_EXEC"

// seccompAvailable: the seccomp filter is built for Linux on amd64 and
// arm64 only.
func seccompAvailable() bool { return false }

const seccompDesc = ""

// capsDesc: without the trampoline, capabilities are not dropped.
const capsDesc = ""
