package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/client"
)

// A task streams durable, summary and best-effort frames; a reader sees
// them (or leaves the best-effort ones out), the summary document follows
// the merge patches; bad frames are refused at the edge, a finished task
// cannot append, and the stream closes with the attempt.
func TestStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	id := e.create(t, client.CreateRequest{Kind: "llm"})
	task := claim(t, e.worker(t, client.WorkerOptions{InstanceID: "s1"}))

	s, err := e.c.ReadSummary(ctx, id, 0)
	require.NoError(t, err)
	assert.Equal(t, client.Summary{}, s, "no summary before the first summary frame")

	r, err := task.AppendFrame(ctx, client.Frame{Type: "log", Payload: []byte("line one"), CorrelationID: "req-1"})
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.FrameCount)
	assert.NotEmpty(t, r.EntryID)
	_, err = task.AppendFrame(ctx, client.Frame{Type: "token", Payload: []byte("Hel"), Mode: client.FrameBestEffort, TTL: 8 * time.Second})
	require.NoError(t, err)
	r, err = task.AppendFrame(ctx, client.Frame{Type: "summary", Payload: []byte(`{"progress":{"step":1},"status":"running"}`), Mode: client.FrameSummary})
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.SummaryVersion)
	r, err = task.AppendFrame(ctx, client.Frame{Type: "summary", Payload: []byte(`{"progress":null,"status":"done"}`), Mode: client.FrameSummary})
	require.NoError(t, err)
	assert.Equal(t, int64(2), r.SummaryVersion)
	assert.Equal(t, int64(4), r.FrameCount)

	s, err = e.c.ReadSummary(ctx, id, 0)
	require.NoError(t, err)
	assert.JSONEq(t, `{"status":"done"}`, s.Document)
	assert.Equal(t, int64(2), s.Version)
	assert.Equal(t, "json-merge-patch", s.PatchKind)
	assert.False(t, s.FirstApplied.IsZero())

	all, err := e.c.ReadStream(ctx, id, 0, client.ReadStreamOptions{})
	require.NoError(t, err)
	require.Len(t, all.Entries, 4)
	assert.Equal(t, "line one", all.Entries[0].Fields["payload"])
	assert.Equal(t, "req-1", all.Entries[0].Fields["correlation_id"])
	assert.Equal(t, "best_effort", all.Entries[1].Fields["mode"])
	durable, err := e.c.ReadStream(ctx, id, 0, client.ReadStreamOptions{ExcludeBestEffort: true, Limit: 10})
	require.NoError(t, err)
	assert.Len(t, durable.Entries, 3)
	assert.Empty(t, durable.ClosedAt)

	var ve *client.ValidationError
	_, err = task.AppendFrame(ctx, client.Frame{Payload: []byte("x")})
	require.ErrorAs(t, err, &ve, "a type is required")
	_, err = task.AppendFrame(ctx, client.Frame{Type: "t", Payload: make([]byte, client.MaxFramePayload+1)})
	require.ErrorAs(t, err, &ve)
	_, err = task.AppendFrame(ctx, client.Frame{Type: "t", Payload: []byte("[1]"), Mode: client.FrameSummary})
	require.ErrorAs(t, err, &ve)
	_, err = task.AppendFrame(ctx, client.Frame{Type: "t", Mode: client.FrameBestEffort})
	require.ErrorAs(t, err, &ve)
	_, err = e.c.ReadStream(ctx, id, 0, client.ReadStreamOptions{Limit: 10001})
	require.ErrorAs(t, err, &ve)

	_, err = task.Complete(ctx, nil)
	require.NoError(t, err)
	_, err = task.AppendFrame(ctx, client.Frame{Type: "log", Payload: []byte("late")})
	require.ErrorIs(t, err, client.ErrTaskFinished)
	closed, err := e.c.ReadStream(ctx, id, 0, client.ReadStreamOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, closed.ClosedAt, "the stream closes with the attempt")
	assert.Equal(t, "attempt_success", closed.ClosedReason)
}
