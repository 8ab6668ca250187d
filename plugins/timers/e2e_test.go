package timers_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/timers"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

const pluginPkg = "github.com/ffscan/ffscan/plugins/timers/cmd/timers"

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// TestMain removes the plugin builds scannertest made.
func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}

// world is state made through sdk/client for one scenario.
type world struct{ *scannertest.World }

func newWorld(t testing.TB, vk valkey.Client) *world {
	return &world{scannertest.NewWorld(t, vk, client.Options{Partitions: parts, Namespace: "e2e"})}
}

// worker registers worker e2e on lane.
func (w *world) worker(lane, instance string) *client.Worker {
	return w.Worker(client.WorkerOptions{WorkerID: "e2e", InstanceID: instance, Lanes: []string{lane}})
}

func (w *world) create(req client.CreateRequest) keys.ExecutionID {
	r, err := w.Client.CreateExecution(w.Ctx, req)
	require.NoError(w.T, err)
	return r.ID
}

func core(t testing.TB, vk valkey.Client, id keys.ExecutionID, fields ...string) []string {
	v, err := vk.Do(context.Background(), vk.B().Hmget().Key(keys.Exec(id).Core()).Field(fields...).Build()).ToArray()
	require.NoError(t, err)
	out := make([]string, len(v))
	for i := range v {
		out[i], _ = v[i].ToString()
	}
	return out
}

func zscore(t testing.TB, vk valkey.Client, key, member string) bool {
	err := vk.Do(context.Background(), vk.B().Zscore().Key(key).Member(member).Build()).Error()
	if valkey.IsValkeyNil(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// A retry scheduled by a failed attempt (fixed 1 ms backoff), a worker's
// own delay on a lane no configuration names, and a delayed create are
// promoted once due; the retried execution is claimed again as a retry.
func TestDelayedPromoter(t *testing.T) {
	t.Parallel()
	var retried, delayed, created keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New:   func() scannerapi.Scanner { return timers.NewDelayedPromoter() },
		Lanes: []string{"default", "side"},
		Setup: func(t testing.TB, vk valkey.Client) {
			w := newWorld(t, vk)
			retried = w.create(client.CreateRequest{Lane: "default", Kind: "flaky",
				Retry: &client.RetryPolicy{MaxRetries: 2, Backoff: client.FixedBackoff(time.Millisecond)}})
			task := w.Claim(w.worker("default", "d1"))
			out, err := task.Fail(w.Ctx, "boom", client.FailOptions{})
			require.NoError(t, err)
			require.True(t, out.RetryScheduled)
			delayed = w.create(client.CreateRequest{Lane: "side", Kind: "poll"})
			st := w.Claim(w.worker("side", "d2"))
			// Far enough ahead to still be in the future when Delay checks
			// it on a loaded machine; the scan waits for the server's clock.
			until := w.NowMs() + 300
			require.NoError(t, st.Delay(w.Ctx, time.UnixMilli(until)))
			created = w.create(client.CreateRequest{Lane: "side", Kind: "later", Delay: 300 * time.Millisecond})
			// A member that is not an execution id is removed.
			w.Do("ZADD", keys.FlowPart(retried.Partition()).LaneDelayed("default"), "1", "garbage")
			w.WaitPast(w.NowMs() + 300)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(3), r.Processed, "%v", r)
			assert.Equal(t, map[string]int64{"invalid/invalid_member": 1}, r.Errors)
			n, err := vk.Do(context.Background(), vk.B().Zscore().Key(keys.FlowPart(retried.Partition()).LaneDelayed("default")).Member("garbage").Build()).ToString()
			assert.True(t, valkey.IsValkeyNil(err), "removed: %q %v", n, err)
			assert.Empty(t, r.Refused)
			for _, id := range []keys.ExecutionID{retried, delayed, created} {
				assert.Equal(t, []string{"runnable", "eligible_now"}, core(t, vk, id, "lifecycle_phase", "eligibility_state"), "%s", id)
			}
			w := newWorld(t, vk)
			again := w.Claim(w.worker("default", "d3"))
			assert.Equal(t, retried, again.ID())
			assert.Equal(t, "retry", again.AttemptType())
		},
	})
	scannertest.Same(t, linked, plugin)
}

// An active attempt past its attempt timeout ends the execution as expired
// when its retry policy has no retry left, and is failed and retried
// (after its backoff) when it has; executions past their deadline (one
// never claimed, one running) end as expired.
func TestExpiryScanners(t *testing.T) {
	t.Parallel()
	var timedOut, retried, lateRunnable, lateActive keys.ExecutionID
	setup := func(t testing.TB, vk valkey.Client) {
		w := newWorld(t, vk)
		timedOut = w.create(client.CreateRequest{Lane: "default", Kind: "slow", AttemptTimeout: time.Millisecond})
		t1 := w.Claim(w.worker("default", "x1"))
		require.Equal(t, timedOut, t1.ID())
		t.Cleanup(t1.Abandon)
		retried = w.create(client.CreateRequest{Lane: "r", Kind: "slow", AttemptTimeout: time.Millisecond,
			Retry: &client.RetryPolicy{MaxRetries: 1, Backoff: client.FixedBackoff(time.Hour)}})
		t5 := w.Claim(w.worker("r", "x5"))
		require.Equal(t, retried, t5.ID())
		t.Cleanup(t5.Abandon)
		// Ahead enough to pass the client's "not in the past" check on a
		// loaded machine.
		deadline := time.UnixMilli(w.NowMs() + 500)
		lateRunnable = w.create(client.CreateRequest{Lane: "c", Kind: "never", Deadline: deadline})
		lateActive = w.create(client.CreateRequest{Lane: "d", Kind: "long", Deadline: deadline})
		t4 := w.Claim(w.worker("d", "x4"))
		t.Cleanup(t4.Abandon)
		w.WaitPast(deadline.UnixMilli())
	}
	t.Run("attempt_timeout", func(t *testing.T) {
		linked, plugin := scannertest.Run(t, scannertest.Case{
			Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
			New:   func() scannerapi.Scanner { return timers.NewAttemptTimeout() },
			Setup: setup,
			Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
				assert.Equal(t, int64(2), r.Processed, "%v", r)
				assert.Empty(t, r.Errors)
				assert.Equal(t, []string{"terminal", "expired", "attempt_timeout"},
					core(t, vk, timedOut, "lifecycle_phase", "terminal_outcome", "failure_reason"))
				assert.Equal(t, []string{"runnable", "not_eligible_until_time", "1", "waiting_for_retry_backoff"},
					core(t, vk, retried, "lifecycle_phase", "eligibility_state", "retry_count", "blocking_reason"),
					"failed with the attempt's own lease, retried after the backoff")
				pk := keys.FlowPart(retried.Partition())
				assert.False(t, zscore(t, vk, pk.AttemptTimeout(), retried.String()), "the timed-out attempt left the index")
				assert.Equal(t, "active", core(t, vk, lateActive, "lifecycle_phase")[0], "its deadline is another scanner's")
			},
		})
		scannertest.Same(t, linked, plugin)
	})
	t.Run("execution_deadline", func(t *testing.T) {
		linked, plugin := scannertest.Run(t, scannertest.Case{
			Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
			New:   func() scannerapi.Scanner { return timers.NewExecutionDeadline() },
			Setup: setup,
			Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
				assert.Equal(t, int64(2), r.Processed, "%v", r)
				assert.Empty(t, r.Errors)
				for _, id := range []keys.ExecutionID{lateRunnable, lateActive} {
					assert.Equal(t, []string{"terminal", "expired", "execution_deadline"},
						core(t, vk, id, "lifecycle_phase", "terminal_outcome", "failure_reason"), "%s", id)
				}
				pk := keys.FlowPart(lateRunnable.Partition())
				assert.False(t, zscore(t, vk, pk.LaneEligible("c"), lateRunnable.String()), "left its runnable set")
			},
		})
		scannertest.Same(t, linked, plugin)
	})
}

// P5: the library expires whatever it is asked to. A candidate the host
// read as due whose timeout a later attempt re-armed (its index score now
// in the future) is left alone.
func TestAttemptTimeoutRechecksScore(t *testing.T) {
	t.Parallel()
	w := &world{scannertest.StartWorld(t, client.Options{Partitions: parts, Namespace: "e2e"})}
	vk := w.Valkey
	id := w.create(client.CreateRequest{Lane: "default", Kind: "slow", AttemptTimeout: time.Hour})
	task := w.Claim(w.worker("default", "r1"))
	t.Cleanup(task.Abandon)
	s := timers.NewAttemptTimeout()
	require.NoError(t, s.Configure(w.Ctx, nil))
	pk := keys.FlowPart(id.Partition())
	res, err := s.ScanPartition(w.Ctx, scannertest.Host(vk), &scannerapi.ScanRequest{
		Scanner: timers.AttemptTimeoutName, Partition: id.Partition(), NowMs: w.NowMs(), Cycle: 1, Batch: 50,
		Candidates: []scannerapi.Candidate{{Source: "attempt_timeout", Key: pk.AttemptTimeout(), Member: id.String(), Score: 1}},
	})
	require.NoError(t, err)
	assert.Zero(t, res.Processed)
	assert.Equal(t, int64(1), res.Skipped)
	assert.Equal(t, "active", core(t, vk, id, "lifecycle_phase")[0])
}

// Each timeout behaviour of a suspension: fail, cancel, expire and
// auto-resume end or resume the execution, escalate leaves it for an
// operator.
func TestSuspensionTimeout(t *testing.T) {
	t.Parallel()
	behaviours := []client.TimeoutBehavior{client.TimeoutFail, client.TimeoutCancel, client.TimeoutExpire,
		client.TimeoutAutoResume, client.TimeoutEscalate}
	ids := make([]keys.ExecutionID, len(behaviours))
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New: func() scannerapi.Scanner { return timers.NewSuspensionTimeout() },
		Setup: func(t testing.TB, vk valkey.Client) {
			w := newWorld(t, vk)
			require.NoError(t, w.Client.RotateWaitpointSecret(w.Ctx, "k1", []byte("e2e secret"), time.Hour))
			wk := w.worker("default", "s1")
			var last int64
			for i, b := range behaviours {
				ids[i] = w.create(client.CreateRequest{Lane: "default", Kind: string(b)})
				task := w.Claim(wk)
				require.Equal(t, ids[i], task.ID())
				_, err := task.Suspend(w.Ctx, client.SuspendRequest{Signals: []string{"go"},
					Timeout: time.Millisecond, OnTimeout: b})
				require.NoError(t, err)
				last = w.NowMs()
			}
			w.WaitPast(last + 1)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(5), r.Processed, "%v", r)
			assert.Empty(t, r.Errors)
			want := [][]string{
				{"terminal", "failed", "failed"},
				{"terminal", "cancelled", "cancelled"},
				{"terminal", "expired", "expired"},
				{"runnable", "none", "waiting"},
				{"suspended", "none", "suspended"},
			}
			for i, id := range ids {
				assert.Equal(t, want[i], core(t, vk, id, "lifecycle_phase", "terminal_outcome", "public_state"), "%s", behaviours[i])
			}
			assert.Equal(t, "paused_by_operator", core(t, vk, ids[4], "blocking_reason")[0])
		},
	})
	scannertest.Same(t, linked, plugin)
}

// A pending waitpoint no suspension used is closed once expired, and its
// index entry goes; an entry whose waitpoint vanished is removed.
func TestPendingWaitpointExpiry(t *testing.T) {
	t.Parallel()
	var wp client.Waitpoint
	var pk keys.FlowPartKeys
	ghost := keys.NewUUID()
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New: func() scannerapi.Scanner { return timers.NewPendingWPExpiry() },
		Setup: func(t testing.TB, vk valkey.Client) {
			w := newWorld(t, vk)
			require.NoError(t, w.Client.RotateWaitpointSecret(w.Ctx, "k1", []byte("e2e secret"), time.Hour))
			id := w.create(client.CreateRequest{Lane: "default", Kind: "callback"})
			task := w.Claim(w.worker("default", "p1"))
			t.Cleanup(task.Abandon)
			var err error
			wp, err = task.CreatePendingWaitpoint(w.Ctx, "", time.Millisecond)
			require.NoError(t, err)
			pk = keys.FlowPart(id.Partition())
			require.NoError(t, vk.Do(w.Ctx, vk.B().Zadd().Key(pk.PendingWaitpointExpiry()).ScoreMember().
				ScoreMember(1, ghost.String()).Build()).Error())
			w.WaitPast(w.NowMs() + 2)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(1), r.Processed, "%v", r)
			assert.Empty(t, r.Errors)
			state, err := vk.Do(context.Background(), vk.B().Hmget().Key(pk.Waitpoint(mustUUID(t, wp.ID))).
				Field("state", "close_reason").Build()).AsStrSlice()
			require.NoError(t, err)
			assert.Equal(t, []string{"closed", "never_committed"}, state)
			assert.False(t, zscore(t, vk, pk.PendingWaitpointExpiry(), wp.ID))
			assert.False(t, zscore(t, vk, pk.PendingWaitpointExpiry(), ghost.String()), "the vanished waitpoint's entry is removed")
		},
	})
	scannertest.Same(t, linked, plugin)
}

func mustUUID(t testing.TB, s string) keys.UUID {
	u, err := keys.ParseUUID(s)
	require.NoError(t, err)
	return u
}

// P14: a lane nobody configured and FlowFabric never recorded (executions
// created with FlowFabric's own ff_create_execution on lane "fresh") is
// discovered from its index keys before the cycle, and its due delays
// are promoted.
func TestDelayedPromoterFindsUnconfiguredLane(t *testing.T) {
	t.Parallel()
	var ids []keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
		New:   func() scannerapi.Scanner { return timers.NewDelayedPromoter() },
		Lanes: []string{"default"},
		Setup: func(t testing.TB, vk valkey.Client) {
			w := newWorld(t, vk)
			ids = nil
			// Ahead enough that the create still finds it in the future.
			due := w.NowMs() + 500
			at := strconv.FormatInt(due, 10)
			for i := 0; i < 3; i++ {
				id := keys.SoloExecutionID(parts, "fresh", keys.NewUUID())
				ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
				v, err := vk.Do(w.Ctx, vk.B().Fcall().Function("ff_create_execution").Numkeys(8).
					Key(ek.Core(), ek.Payload(), ek.Policy(), ek.Tags(), pk.LaneDelayed("fresh"), pk.Noop(),
						pk.ExecutionDeadline(), pk.AllExecutions()).
					Arg(id.String(), "ns", "fresh", "task", "0", "ff", "{}", "", at, "", "", "",
						strconv.Itoa(int(id.Partition().Index))).Build()).ToArray()
				require.NoError(t, err)
				n, _ := v[0].AsInt64()
				require.Equal(t, int64(1), n)
				ids = append(ids, id)
			}
			members, err := vk.Do(w.Ctx, vk.B().Smembers().Key(keys.LanesIndex).Build()).AsStrSlice()
			require.NoError(t, err)
			require.NotContains(t, members, "fresh", "FlowFabric's library records no lane")
			w.WaitPast(due)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(3), r.Processed, "%v", r)
			for _, id := range ids {
				assert.Equal(t, []string{"runnable", "eligible_now"}, core(t, vk, id, "lifecycle_phase", "eligibility_state"))
			}
		},
	})
	scannertest.Same(t, linked, plugin)
}

// A dry run reads and reports but changes nothing: the host refuses any
// write or FCALL a dry-run scanner sends, and none is sent.
func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	var retried, delayed keys.ExecutionID
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts, DryRun: true,
		New:   func() scannerapi.Scanner { return timers.NewDelayedPromoter() },
		Lanes: []string{"default"},
		Setup: func(t testing.TB, vk valkey.Client) {
			w := newWorld(t, vk)
			retried = w.create(client.CreateRequest{Lane: "default", Kind: "flaky",
				Retry: &client.RetryPolicy{MaxRetries: 2, Backoff: client.FixedBackoff(time.Millisecond)}})
			task := w.Claim(w.worker("default", "y1"))
			_, err := task.Fail(w.Ctx, "boom", client.FailOptions{})
			require.NoError(t, err)
			delayed = w.create(client.CreateRequest{Lane: "default", Kind: "later", Delay: 300 * time.Millisecond})
			w.WaitPast(w.NowMs() + 300)
		},
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, int64(2), r.Processed, "predicted: %v", r)
			assert.Empty(t, r.Refused)
			assert.Zero(t, r.Commands["FCALL ff_promote_delayed"])
			assert.NotEmpty(t, r.Notes)
			for _, id := range []keys.ExecutionID{retried, delayed} {
				assert.Equal(t, "not_eligible_until_time", core(t, vk, id, "eligibility_state")[0], "unchanged")
			}
		},
	})
	scannertest.Same(t, linked, plugin)
}

// The namespace filter (P13): a scanner restricted to another namespace
// leaves these executions alone, and one restricted to theirs acts.
func TestFilterApplies(t *testing.T) {
	t.Parallel()
	for ns, want := range map[string]int64{"elsewhere": 0, "e2e": 1} {
		t.Run(ns, func(t *testing.T) {
			linked, plugin := scannertest.Run(t, scannertest.Case{
				Runner: hosttest.Runner{}, Binary: scannertest.PluginBinary(t, pluginPkg), Partitions: parts,
				New:     func() scannerapi.Scanner { return timers.NewDelayedPromoter() },
				Options: map[string]string{"namespace": ns},
				Lanes:   []string{"default"},
				Setup: func(t testing.TB, vk valkey.Client) {
					w := newWorld(t, vk)
					w.create(client.CreateRequest{Lane: "default", Kind: "later", Delay: 300 * time.Millisecond})
					w.WaitPast(w.NowMs() + 300)
				},
				Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
					assert.Equal(t, want, r.Processed, "%v", r)
					assert.Equal(t, 1-want, r.Skipped)
					assert.Empty(t, r.Errors)
				},
			})
			scannertest.Same(t, linked, plugin)
		})
	}
}
