//go:build linux && (amd64 || arm64)

package pluginhost

import (
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/stretchr/testify/require"
)

// The allow-list names syscalls the other architecture's table knows
// too: a name one of them lacks fails the filter's assembly there, and
// with it every confined launch (the trampoline refuses to exec).
func TestSeccompAllowListNamesExistOnBothArchitectures(t *testing.T) {
	for name, own := range map[string][]string{"amd64": {"newfstatat", "arch_prctl"}, "arm64": {"fstatat"}} {
		info, err := arch.GetInfo(name)
		require.NoError(t, err)
		for _, n := range append(append([]string{}, allowedSyscalls...), own...) {
			_, ok := info.SyscallNames[n]
			require.True(t, ok, "%s has no syscall %s", name, n)
		}
	}
}
