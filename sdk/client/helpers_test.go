package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	testenv "github.com/ffscan/ffscan/sdk/testserver"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
)

// env is one throwaway server with the library loaded and a client on it.
type env struct {
	srv *testenv.Server
	vk  valkey.Client
	c   *client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testenv.New(t)
	vk := srv.Client(t)
	ctx := testCtx(t)
	_, err := lua.New(vk, lua.Options{}).Ensure(ctx)
	require.NoError(t, err)
	c, err := client.New(ctx, vk, client.Options{})
	require.NoError(t, err)
	return &env{srv: srv, vk: vk, c: c}
}

// testCtx is a generous per-test deadline: tests wait for conditions by
// polling, never by sleeping a fixed time, and this only stops a hang.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) do(t *testing.T, args ...string) valkey.ValkeyResult {
	t.Helper()
	return e.vk.Do(context.Background(), e.vk.B().Arbitrary(args...).Build())
}

func (e *env) str(t *testing.T, args ...string) string {
	t.Helper()
	s, err := e.do(t, args...).ToString()
	if valkey.IsValkeyNil(err) {
		return ""
	}
	require.NoError(t, err)
	return s
}

func (e *env) zscore(t *testing.T, key, member string) (float64, bool) {
	t.Helper()
	f, err := e.do(t, "ZSCORE", key, member).AsFloat64()
	if valkey.IsValkeyNil(err) {
		return 0, false
	}
	require.NoError(t, err)
	return f, true
}

func (e *env) dbsize(t *testing.T) int64 {
	t.Helper()
	n, err := e.do(t, "DBSIZE").AsInt64()
	require.NoError(t, err)
	return n
}

func (e *env) state(t *testing.T, id keys.ExecutionID) *client.ExecutionState {
	t.Helper()
	s, err := e.c.GetExecution(context.Background(), id)
	require.NoError(t, err)
	return s
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// createFlow makes a flow with the library directly (the flow client is
// not part of this package's tests).
func (e *env) createFlow(t *testing.T) keys.FlowID {
	t.Helper()
	fid := keys.NewFlowID()
	fk := keys.Flow(e.c.Partitions(), fid)
	idx := keys.FlowPart(e.c.Partitions().FlowPartition(fid)).FlowIndex()
	res := e.do(t, "FCALL", "ff_create_flow", "3", fk.Core(), fk.Members(), idx, fid.String(), "dag", "default", "0")
	require.NoError(t, res.Error())
	return fid
}

func (e *env) create(t *testing.T, req client.CreateRequest) keys.ExecutionID {
	t.Helper()
	if req.Lane == "" {
		req.Lane = "default"
	}
	r, err := e.c.CreateExecution(context.Background(), req)
	require.NoError(t, err)
	require.False(t, r.Duplicate)
	return r.ID
}
