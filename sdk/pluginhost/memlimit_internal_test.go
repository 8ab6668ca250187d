package pluginhost

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The watch finds the Go runtime's out-of-memory line however the reads
// cut it, and passes the stream through unchanged.
func TestOOMWatchSeesTheRuntimeLineAcrossReads(t *testing.T) {
	const text = "some log line\nfatal error: runtime: out of memory\n\ngoroutine 1 [running]:\n"
	for _, tc := range []struct {
		name string
		text string
		want bool
	}{{"oom", text, true}, {"other death", "panic: boom\n\ngoroutine 1 [running]:\n", false}} {
		w := &stderrWatch{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.text)))}
		got, err := io.ReadAll(w)
		require.NoError(t, err)
		assert.Equal(t, tc.text, string(got), tc.name)
		assert.Equal(t, tc.want, w.seen.Load(), tc.name)
	}
	err := &MemoryLimitError{Limit: 256 << 20, Err: errors.New("exit status 2")}
	assert.Equal(t, "exit status 2: the plugin passed its memory limit of 256 MiB (the Go runtime ran out of memory)", err.Error())
}

// The watch keeps the first line of a crash report, whole or cut at
// maxCrashLine, however the reads cut it; log entries before it and the
// report's stack after it are not kept.
func TestStderrWatchKeepsTheCrashLine(t *testing.T) {
	long := "panic: " + strings.Repeat("x", 500)
	for _, tc := range []struct {
		name, text, want string
	}{
		{"cgo thread", "{\"@level\":\"info\",\"@message\":\"serving\"}\nruntime/cgo: pthread_create failed: Resource temporarily unavailable\nSIGABRT: abort\nPC=0x7f3f m=5\n", "runtime/cgo: pthread_create failed: Resource temporarily unavailable"},
		{"panic", "panic: assignment to entry in nil map\n\ngoroutine 7 [running]:\nmain.main()\n", "panic: assignment to entry in nil map"},
		{"long", long + "\n", long[:maxCrashLine]},
		{"unfinished", "panic: cut", ""},
		{"no crash", "a line\nruntime stack:\n", ""},
	} {
		w := &stderrWatch{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.text)))}
		got, err := io.ReadAll(w)
		require.NoError(t, err)
		assert.Equal(t, tc.text, string(got), tc.name)
		assert.Equal(t, tc.want, w.crashLine(), tc.name)
	}
	err := &CrashError{Err: errors.New("exit status 2"), Line: "panic: \x1b[31mforged\nline"}
	assert.Equal(t, `exit status 2 (the plugin printed "panic: \x1b[31mforged\nline")`, err.Error())
}
