package client_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/flowtest"
	testenv "github.com/ffscan/ffscan/sdk/testserver"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
)

// flowEnv is a throwaway server with the library loaded and a client, for
// the flow and budget tests (independent of the producer/worker helpers).
type flowEnv struct {
	vk  valkey.Client
	lib *lua.Library
	c   *client.Client
	ctx context.Context
}

func newFlowEnv(t *testing.T) *flowEnv {
	t.Helper()
	srv := testenv.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	lib := lua.New(vk, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	c, err := client.New(ctx, vk, client.Options{Library: lib})
	require.NoError(t, err)
	return &flowEnv{vk: vk, lib: lib, c: c, ctx: ctx}
}

func (e *flowEnv) flow(t *testing.T) keys.FlowID {
	t.Helper()
	r, err := e.c.CreateFlow(e.ctx, client.CreateFlowRequest{})
	require.NoError(t, err)
	return r.ID
}

func (e *flowEnv) member(t *testing.T, fid keys.FlowID, payload string) keys.ExecutionID {
	t.Helper()
	r, err := e.c.CreateExecution(e.ctx, client.CreateRequest{Flow: &fid, Lane: "default", Kind: "step", Payload: []byte(payload)})
	require.NoError(t, err)
	return r.ID
}

func (e *flowEnv) edge(t *testing.T, fid keys.FlowID, up, down keys.ExecutionID) client.DependencyResult {
	t.Helper()
	r, err := e.c.AddDependency(e.ctx, client.DependencyRequest{Flow: fid, Upstream: up, Downstream: down})
	require.NoError(t, err)
	return r
}

func (e *flowEnv) core(t *testing.T, id keys.ExecutionID) map[string]string {
	t.Helper()
	m, err := flowtest.Core(e.ctx, e.vk, id)
	require.NoError(t, err)
	return m
}

func (e *flowEnv) members(t *testing.T, key string) []string {
	t.Helper()
	m, err := e.vk.Do(e.ctx, e.vk.B().Smembers().Key(key).Build()).AsStrSlice()
	require.NoError(t, err)
	sort.Strings(m)
	return m
}

func (e *flowEnv) zscore(t *testing.T, key, member string) (float64, bool) {
	t.Helper()
	f, err := e.vk.Do(e.ctx, e.vk.B().Zscore().Key(key).Member(member).Build()).AsFloat64()
	if valkey.IsValkeyNil(err) {
		return 0, false
	}
	require.NoError(t, err)
	return f, true
}

// keyspace returns every key with its DUMP, to prove a refused call wrote
// nothing.
func (e *flowEnv) keyspace(t *testing.T) map[string]string {
	t.Helper()
	ks, err := e.vk.Do(e.ctx, e.vk.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	out := make(map[string]string, len(ks))
	for _, k := range ks {
		d, err := e.vk.Do(e.ctx, e.vk.B().Dump().Key(k).Build()).ToString()
		require.NoError(t, err)
		out[k] = d
	}
	return out
}

// sameKeyspace fails the test naming every key that appeared, vanished or
// changed since before.
func (e *flowEnv) sameKeyspace(t *testing.T, before map[string]string) {
	t.Helper()
	after := e.keyspace(t)
	var diff []string
	for k, v := range after {
		if old, ok := before[k]; !ok {
			diff = append(diff, "+"+k)
		} else if old != v {
			diff = append(diff, "~"+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			diff = append(diff, "-"+k)
		}
	}
	sort.Strings(diff)
	require.Empty(t, diff, "keyspace changed")
}

// interceptor wraps a valkey client and runs a hook before each FCALL of
// one function, to make another writer act at exactly that moment.
type interceptor struct {
	valkey.Client
	mu       sync.Mutex
	function string
	hook     func()
	calls    int
}

func (i *interceptor) before(cmd valkey.Completed) {
	args := cmd.Commands()
	if len(args) < 2 || !strings.EqualFold(args[0], "FCALL") || args[1] != i.function {
		return
	}
	i.mu.Lock()
	i.calls++
	hook := i.hook
	i.mu.Unlock()
	if hook != nil {
		hook()
	}
}

func (i *interceptor) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	i.before(cmd)
	return i.Client.Do(ctx, cmd)
}

func (i *interceptor) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	for _, c := range cmds {
		i.before(c)
	}
	return i.Client.DoMulti(ctx, cmds...)
}
