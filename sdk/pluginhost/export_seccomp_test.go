//go:build linux && (amd64 || arm64)

package pluginhost

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// AuditArch is the architecture the filter admits.
const AuditArch = auditArch

// SeccompVerdict runs the plugin's seccomp filter, as the kernel would,
// on one syscall: number nr of architecture arch with args, and returns
// the filter's action (SECCOMP_RET_*, with the errno in its low bits).
func SeccompVerdict(nr uint32, arch uint32, args [6]uint64) (uint32, error) {
	return SeccompVerdictFor(SeccompTestPid, nr, arch, args)
}

// SeccompTestPid is the pid SeccompVerdict builds the filter for.
const SeccompTestPid = 4242

// SeccompVerdictFor is SeccompVerdict for the filter of a plugin whose
// pid is pid.
func SeccompVerdictFor(pid int, nr uint32, arch uint32, args [6]uint64) (uint32, error) {
	insts, err := processFilter(pid, false)
	if err != nil {
		return 0, err
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		return 0, fmt.Errorf("the filter does not load: %w", err)
	}
	// struct seccomp_data: nr, arch, instruction_pointer, args[6]. The
	// kernel loads words in native order and this VM in network order:
	// each 32-bit word is written big-endian, each 64-bit argument as
	// its two words in native (little-endian) order.
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[16+8*i+4:], uint32(a>>32))
	}
	v, err := vm.Run(data)
	return uint32(v), err
}
