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
		w := &oomWatch{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.text)))}
		got, err := io.ReadAll(w)
		require.NoError(t, err)
		assert.Equal(t, tc.text, string(got), tc.name)
		assert.Equal(t, tc.want, w.seen.Load(), tc.name)
	}
	err := &MemoryLimitError{Limit: 256 << 20, Err: errors.New("exit status 2")}
	assert.Equal(t, "exit status 2: the plugin passed its memory limit of 256 MiB (the Go runtime ran out of memory)", err.Error())
}
