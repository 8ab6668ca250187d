package plaintext

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
)

func TestLine(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "plain text, ünïcode", Line("plain text, ünïcode", 100), "clean text is kept")
	assert.Equal(t, `a\nb\r\tc\x1b[31md\x00\x7f\xff\u2028\u202e`, Line("a\nb\r\tc\x1b[31md\x00\x7f\xff\u2028\u202e", 100))

	long := strings.Repeat("x", 1000) + "\n[ERROR] ffscan: forged"
	got := Line(long, 200)
	assert.LessOrEqual(t, len(got), 200)
	assert.True(t, strings.HasSuffix(got, "…[cut: 1023 bytes]"), got)
	assert.True(t, strings.HasPrefix(got, "xxxx"), got)
	assert.NotContains(t, got, "\n")

	// Escapes are never cut in half, and the bound holds for text that
	// escapes grow past it.
	ctl := strings.Repeat("\x01", 300)
	got = Line(ctl, 100)
	assert.LessOrEqual(t, len(got), 100)
	before, _, _ := strings.Cut(got, "…")
	assert.Equal(t, 0, len(before)%4, got)
	assert.Equal(t, "abc", Line("abc", 3))
	assert.Equal(t, "…[cut: 5 bytes]", Line("abcde", 3), "a bound below the marker's length keeps only the marker")
}

func TestErrorKeepsTheChain(t *testing.T) {
	t.Parallel()
	err := Error(errors.Join(fs.ErrNotExist, errors.New(strings.Repeat("y\n", 500))), 64)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.LessOrEqual(t, len(err.Error()), 64)
	assert.NotContains(t, err.Error(), "\n")
	plain := errors.New("fine")
	assert.Same(t, plain, Error(plain, 64))
}

func TestLoggerWritesOneBoundedLinePerCall(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	l := Logger(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Trace}), 100)
	forged := "ok\n2024-01-01T00:00:00.000Z [ERROR] ffscan: forged " + strings.Repeat("z", 500)
	l.Named("plug\nin").With("k\ney", forged).Error(forged, "v", errors.New(forged), "n", 42, "m", map[string]any{"x": "a\nb"})
	args := make([]any, 0, 400)
	for i := range 200 {
		args = append(args, "k", i)
	}
	l.Info("many", args...)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	assert.Len(t, lines, 2, out.String())
	assert.NotContains(t, out.String(), "\n2024")
	assert.Contains(t, lines[0], "n=42")
	assert.Contains(t, lines[0], "…[cut: ")
	assert.Contains(t, lines[1], "args_cut=336")
	assert.Same(t, l, Logger(l, 200), "a logger bounded tighter is kept")
}
