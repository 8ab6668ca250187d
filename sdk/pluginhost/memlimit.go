package pluginhost

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"
)

// trampolinePath is the program a confined plugin is started through
// (trampoline_linux.go): the launching program itself.
const trampolinePath = "/proc/self/exe"

// outOfMemory is what the Go runtime prints when it cannot map memory
// (under RLIMIT_DATA: "fatal error: runtime: out of memory" or "fatal
// error: out of memory allocating heap arena metadata"). A plugin could
// print it without dying of it: it would only change what its exit is
// said to be.
var outOfMemory = []byte("out of memory")

// oomWatch passes the plugin's stderr through (go-plugin reads and logs
// it) and notes whether the Go runtime reported running out of memory,
// so that the exit can say why.
type oomWatch struct {
	io.ReadCloser
	tail []byte // the last bytes read, for a marker cut between reads
	seen atomic.Bool
}

func (w *oomWatch) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if n > 0 && !w.seen.Load() {
		buf := append(w.tail, p[:n]...)
		if bytes.Contains(buf, outOfMemory) {
			w.seen.Store(true)
		}
		keep := min(len(buf), len(outOfMemory)-1)
		w.tail = append(w.tail[:0], buf[len(buf)-keep:]...)
	}
	return n, err
}

// MemoryLimitError is a plugin's exit after it passed its memory limit.
type MemoryLimitError struct {
	Limit int64
	Err   error // the process's exit status
	// Cgroup says the kernel killed it at its control group's bound
	// (memory it held outside the Go heap: files in memory, say); else
	// the Go runtime ran out of memory under RLIMIT_DATA.
	Cgroup bool
}

func (e *MemoryLimitError) Error() string {
	if e.Cgroup {
		return fmt.Sprintf("%v: the plugin passed its memory limit of %d MiB (killed by the kernel at its control group's memory bound)", e.Err, e.Limit>>20)
	}
	return fmt.Sprintf("%v: the plugin passed its memory limit of %d MiB (the Go runtime ran out of memory)", e.Err, e.Limit>>20)
}

func (e *MemoryLimitError) Unwrap() error { return e.Err }

// memoryDesc is the limit where no control group applies, for
// Plugin.Bounds.
func memoryDesc(limit int64) string {
	return fmt.Sprintf("rlimits: memory at most %d MiB (RLIMIT_DATA, private mappings only)", limit>>20)
}
