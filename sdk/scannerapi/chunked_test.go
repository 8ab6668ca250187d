package scannerapi

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExecChunked(t *testing.T) {
	var sizes []int
	calls := 0
	host := HostFunc(func(_ context.Context, cmds []Command) ([]Reply, error) {
		calls++
		sizes = append(sizes, len(cmds))
		if calls == 3 {
			return nil, errors.New("gone")
		}
		out := make([]Reply, len(cmds))
		for i, c := range cmds {
			out[i] = Reply{Kind: KindString, Str: c[1]}
		}
		return out, nil
	})
	cmds := make([]Command, 7)
	for i := range cmds {
		cmds[i] = Command{"GET", string(rune('a' + i))}
	}
	out, err := ExecChunked(context.Background(), host, cmds, 3)
	require.NoError(t, err)
	assert.Equal(t, []int{3, 3, 1}, sizes)
	require.Len(t, out, 7)
	assert.Equal(t, "a", out[0].Str)
	assert.Equal(t, "f", out[5].Str)
	assert.Equal(t, ErrTransport, out[6].ErrClass, "a later failed batch becomes per-command errors")

	calls = 0
	failFirst := HostFunc(func(context.Context, []Command) ([]Reply, error) { return nil, errors.New("down") })
	_, err = ExecChunked(context.Background(), failFirst, cmds, 0)
	assert.EqualError(t, err, "down")
}
