package client_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunHandlesEveryOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []keys.ExecutionID
	want := map[keys.ExecutionID]string{}
	for i, p := range []string{"ok", "ok", "fail", "panic", "ok", "self-cancel", "ok", "ok", "fail", "ok"} {
		lane := []string{"x", "y"}[i%2]
		id := e.create(t, client.CreateRequest{Lane: lane, Payload: []byte(p)})
		ids = append(ids, id)
		want[id] = map[string]string{"ok": client.OutcomeSuccess, "fail": client.OutcomeFailed,
			"panic": client.OutcomeFailed, "self-cancel": client.OutcomeCancelled}[p]
	}
	w := e.worker(t, client.WorkerOptions{Lanes: []string{"x", "y"}, MaxConcurrentTasks: 3,
		PollInterval: 10 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond})

	var running, peak atomic.Int32
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func(ctx context.Context, task *client.Task) ([]byte, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond) // overlap handlers
			switch string(task.Payload()) {
			case "fail":
				return nil, &client.FailError{Category: "test", Err: errors.New("asked to fail")}
			case "panic":
				panic("asked to panic")
			case "self-cancel":
				_, err := task.Cancel(ctx, "handler decided")
				return nil, err
			}
			return append([]byte("done:"), task.Payload()...), nil
		})
	}()
	eventually(t, "all executions terminal", func() bool {
		for _, id := range ids {
			if !e.state(t, id).Terminal() {
				return false
			}
		}
		return true
	})
	stop()
	require.NoError(t, <-done)
	assert.LessOrEqual(t, peak.Load(), int32(3), "never more handlers than permits")
	assert.Equal(t, 0, w.InFlight())
	for _, id := range ids {
		s := e.state(t, id)
		assert.Equal(t, want[id], s.TerminalOutcome, id.String())
		switch string(s.Raw["failure_reason"]) {
		case "test: asked to fail":
			assert.Equal(t, "test", e.str(t, "HGET", keys.Exec(id).Attempt(0), "failure_category"))
		case "":
		default:
			assert.Contains(t, s.FailureReason, "handler panicked")
			assert.Equal(t, "panic", e.str(t, "HGET", keys.Exec(id).Attempt(0), "failure_category"))
		}
	}
}

func TestRunSurfacesLeaseLossToTheHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.create(t, client.CreateRequest{})
	w := e.worker(t, client.WorkerOptions{LeaseTTL: 600 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	var (
		mu    sync.Mutex
		cause error
	)
	started := make(chan struct{})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func(ctx context.Context, task *client.Task) ([]byte, error) {
			close(started)
			<-ctx.Done() // a long task that only stops when told
			mu.Lock()
			cause = context.Cause(ctx)
			mu.Unlock()
			return nil, ctx.Err()
		})
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("not claimed")
	}
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	e.fcall(t, "ff_revoke_lease", []string{ek.Core(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LeaseExpiry(), pk.WorkerLeases(w.InstanceID())},
		id.String(), "", "operator")
	eventually(t, "handler finished and permit returned", func() bool { return w.InFlight() == 0 })
	stop()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	assert.ErrorIs(t, cause, client.ErrLeaseRevoked)
	assert.Equal(t, client.OwnershipLeaseRevoked, e.state(t, id).OwnershipState, "the fenced fail changed nothing")
}

func TestRunStopsWhenTheWorkerCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := e.c.NewWorker(testCtx(t), client.WorkerOptions{WorkerID: "w", Lanes: []string{"default"}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), func(context.Context, *client.Task) ([]byte, error) { return nil, nil })
	}()
	require.NoError(t, w.Close(testCtx(t)))
	select {
	case err := <-done:
		assert.ErrorIs(t, err, client.ErrWorkerClosed)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop")
	}
}
