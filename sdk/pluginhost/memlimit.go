package pluginhost

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
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

// crashPrefixes begin the first line of what the Go runtime prints when
// a program dies of a panic, a fatal error or a signal.
var crashPrefixes = []string{"panic: ", "fatal error: ", "runtime/cgo: ", "fatal: morestack",
	"SIGSEGV: ", "SIGBUS: ", "SIGABRT: ", "SIGILL: ", "SIGFPE: ", "SIGTRAP: ", "unexpected fault address "}

// maxCrashLine bounds the crash line kept (the rest of it is dropped).
const maxCrashLine = 200

// stderrWatch passes the plugin's stderr through (go-plugin reads and
// logs it, lines that are no log entry at debug level only) and notes
// what says why the plugin exits: whether the Go runtime reported
// running out of memory, and the first line of a crash report, so that
// an operator logging at info still reads why a plugin died. The
// plugin writes both, so they only change what its exit is said to be.
type stderrWatch struct {
	io.ReadCloser
	tail []byte // the last bytes read, for a marker cut between reads
	seen atomic.Bool

	mu    sync.Mutex
	line  []byte // the current line's first maxCrashLine bytes
	crash string // the first crash line, once complete
}

func (w *stderrWatch) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if n > 0 && !w.seen.Load() {
		buf := append(w.tail, p[:n]...)
		if bytes.Contains(buf, outOfMemory) {
			w.seen.Store(true)
		}
		keep := min(len(buf), len(outOfMemory)-1)
		w.tail = append(w.tail[:0], buf[len(buf)-keep:]...)
	}
	if n > 0 {
		w.noteLines(p[:n])
	}
	return n, err
}

// noteLines keeps the first line that begins a crash report.
func (w *stderrWatch) noteLines(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.crash != "" {
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if room := maxCrashLine - len(w.line); room > 0 {
			w.line = append(w.line, part[:min(len(part), room)]...)
		}
		if i < 0 {
			return
		}
		line := string(w.line)
		w.line = w.line[:0]
		b = b[i+1:]
		for _, prefix := range crashPrefixes {
			if strings.HasPrefix(line, prefix) {
				w.crash = line
				return
			}
		}
	}
}

// crashLine is the first line of the plugin's crash report, or "".
func (w *stderrWatch) crashLine() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.crash
}

// CrashError is a plugin's exit with the first line of the crash report
// it printed (its own words: quoted, never more than a line).
type CrashError struct {
	Err  error // the process's exit status
	Line string
}

func (e *CrashError) Error() string {
	return fmt.Sprintf("%v (the plugin printed %q)", e.Err, e.Line)
}

func (e *CrashError) Unwrap() error { return e.Err }

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
