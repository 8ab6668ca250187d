package client_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/stretchr/testify/require"
)

// worker connects a worker with test-friendly defaults and closes it at
// the end of the test.
func (e *env) worker(t *testing.T, opts client.WorkerOptions) *client.Worker {
	t.Helper()
	if opts.WorkerID == "" {
		opts.WorkerID = "w"
	}
	if len(opts.Lanes) == 0 {
		opts.Lanes = []string{"default"}
	}
	w, err := e.c.NewWorker(testCtx(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Tests end holding tasks on purpose: close without waiting for
		// them (Close abandons what is left), or every such test would
		// wait out the deadline.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = w.Close(ctx)
	})
	return w
}

// claim polls ClaimNext until it returns a task: one call covers one chunk
// of partitions, so finding work can take a full sweep.
func claim(t *testing.T, w *client.Worker) *client.Task {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		task, err := w.ClaimNext(testCtx(t))
		require.NoError(t, err)
		if task != nil {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatal("no task claimed")
		}
	}
}

// claimNone asserts that a full sweep of every lane finds nothing.
func claimNone(t *testing.T, e *env, w *client.Worker) {
	t.Helper()
	polls := (int(e.c.Partitions().Flow)/client.PartitionScanChunk + 1) * len(w.Lanes())
	for i := 0; i < polls; i++ {
		task, err := w.ClaimNext(testCtx(t))
		require.NoError(t, err)
		require.Nil(t, task, "expected nothing to claim")
	}
}

// fcall runs a library function directly (scanner or operator functions
// this package does not wrap) and returns the reply as strings.
func (e *env) fcall(t *testing.T, fn string, keys []string, args ...string) []string {
	t.Helper()
	res := lua.New(e.vk, lua.Options{}).Do(context.Background(), lua.Call{Function: fn, Keys: keys, Args: args})
	require.NoError(t, res.Error())
	arr, err := res.ToArray()
	require.NoError(t, err)
	out := make([]string, len(arr))
	for i := range arr {
		if n, err := arr[i].AsInt64(); err == nil && arr[i].IsInt64() {
			out[i] = itoa(n)
			continue
		}
		out[i], _ = arr[i].ToString()
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// markExpired is what the lease-expiry scanner does for one execution.
func (e *env) markExpired(t *testing.T, id keys.ExecutionID) []string {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	return e.fcall(t, "ff_mark_lease_expired_if_due",
		[]string{ek.Core(), ek.LeaseCurrent(), pk.LeaseExpiry(), ek.LeaseHistory()}, id.String())
}

// waitMarkedExpired calls the scanner's function until the lease is due
// and marked, as the lease-expiry scanner would on its next cycle.
func (e *env) waitMarkedExpired(t *testing.T, id keys.ExecutionID) {
	t.Helper()
	eventually(t, "lease marked expired", func() bool {
		r := e.markExpired(t, id)
		return r[1] == "OK" && r[2] == "marked_expired"
	})
}

// promote is the delayed promoter for one execution.
func (e *env) promote(t *testing.T, id keys.ExecutionID, lane string) []string {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	return e.fcall(t, "ff_promote_delayed", []string{ek.Core(), pk.LaneDelayed(lane), pk.LaneEligible(lane)},
		id.String(), itoa(time.Now().Add(time.Hour).UnixMilli()))
}

// completeRaw completes with a task's fence behind the task's back, as a
// first call whose reply was lost would have.
func (e *env) completeRaw(t *testing.T, task *client.Task, instance string) []string {
	id := task.ID()
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	i := task.AttemptIndex()
	return e.fcall(t, "ff_complete_execution",
		[]string{ek.Core(), ek.Attempt(i), pk.LeaseExpiry(), pk.WorkerLeases(instance), pk.LaneTerminal(task.Lane()),
			ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(task.Lane()), ek.StreamMeta(i), ek.Result(),
			pk.AttemptTimeout(), pk.ExecutionDeadline()},
		id.String(), task.LeaseID(), itoa(int64(task.LeaseEpoch())), task.AttemptID(), "first")
}
