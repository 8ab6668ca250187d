package depexec_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/depexec"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// env is a server with the library, a client for building flows and the two
// executors a Resolver runs over: the library directly (the host's
// completion listener) and the host's callback service as a plugin sees it
// (scannerapi.Host, with the allowlist a reconciler plugin would declare).
type env struct {
	vk  valkey.Client
	lib *lua.Library
	c   *client.Client
	ctx context.Context

	direct depresolve.Executor
	plugin scannerapi.Host
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testserver.New(t)
	vk := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	lib := lua.New(vk, lua.Options{})
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	c, err := client.New(ctx, vk, client.Options{Library: lib})
	require.NoError(t, err)

	svc := callbacks.New(lib, nil)
	pol, unsupported := callbacks.PolicyFromInfo(scannerapi.Info{
		Name: "dependency_reconciler", Commands: depresolve.Commands(), Functions: depresolve.Functions(),
	}, false)
	require.Empty(t, unsupported)
	svc.Register("dependency_reconciler", pol)
	return &env{vk: vk, lib: lib, c: c, ctx: ctx,
		direct: depexec.LibraryExecutor(lib), plugin: svc.HostFor("dependency_reconciler")}
}

func (e *env) flow(t *testing.T) keys.FlowID {
	t.Helper()
	r, err := e.c.CreateFlow(e.ctx, client.CreateFlowRequest{})
	require.NoError(t, err)
	return r.ID
}

func (e *env) member(t *testing.T, fid keys.FlowID, payload string) keys.ExecutionID {
	t.Helper()
	r, err := e.c.CreateExecution(e.ctx, client.CreateRequest{Flow: &fid, Lane: "default", Payload: []byte(payload)})
	require.NoError(t, err)
	return r.ID
}

func (e *env) edge(t *testing.T, fid keys.FlowID, up, down keys.ExecutionID, dataRef string) {
	t.Helper()
	_, err := e.c.AddDependency(e.ctx, client.DependencyRequest{Flow: fid, Upstream: up, Downstream: down, DataRef: dataRef})
	require.NoError(t, err)
}

func (e *env) succeed(t *testing.T, id keys.ExecutionID, result string) {
	t.Helper()
	require.NoError(t, flowtest.Succeed(e.ctx, e.lib, id, []byte(result)))
}

func (e *env) fail(t *testing.T, id keys.ExecutionID) {
	t.Helper()
	require.NoError(t, flowtest.Flunk(e.ctx, e.lib, id, "boom"))
}

// state is the public state of an execution (waiting, waiting_children,
// completed, skipped, ...).
func (e *env) state(t *testing.T, id keys.ExecutionID) string {
	t.Helper()
	core, err := flowtest.Core(e.ctx, e.vk, id)
	require.NoError(t, err)
	return core["public_state"]
}

func (e *env) payload(t *testing.T, id keys.ExecutionID) string {
	t.Helper()
	s, err := e.vk.Do(e.ctx, e.vk.B().Get().Key(keys.Exec(id).Payload()).Build()).ToString()
	require.NoError(t, err)
	return s
}

func (e *env) eligible(t *testing.T, id keys.ExecutionID) bool {
	t.Helper()
	_, err := e.vk.Do(e.ctx, e.vk.B().Zscore().Key(keys.FlowPart(id.Partition()).LaneEligible("default")).Member(id.String()).Build()).AsFloat64()
	if valkey.IsValkeyNil(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

func cascade(t *testing.T, r *depresolve.Resolver, fid keys.FlowID, id keys.ExecutionID) depresolve.Result {
	t.Helper()
	res, err := r.Cascade(context.Background(), depresolve.Completion{Execution: id, Flow: fid})
	require.NoError(t, err)
	return res
}

// executors runs a test body once per executor.
func executors(t *testing.T, body func(t *testing.T, e *env, ex depresolve.Executor)) {
	t.Run("library", func(t *testing.T) {
		e := newEnv(t)
		body(t, e, e.direct)
	})
	t.Run("plugin-host", func(t *testing.T) {
		e := newEnv(t)
		body(t, e, e.plugin)
	})
}

// A -> {B, C} -> D: D is released only once both B and C have completed,
// and the edge carrying data hands C's result to D as its payload.
func TestDiamondReleasesDAfterBothParents(t *testing.T) {
	executors(t, func(t *testing.T, e *env, ex depresolve.Executor) {
		r := depresolve.New(ex, depresolve.Options{})
		fid := e.flow(t)
		a, b, c, d := e.member(t, fid, "a"), e.member(t, fid, "b"), e.member(t, fid, "c"), e.member(t, fid, "d")
		e.edge(t, fid, a, b, "")
		e.edge(t, fid, a, c, "")
		e.edge(t, fid, b, d, "")
		e.edge(t, fid, c, d, "input")
		for _, id := range []keys.ExecutionID{b, c, d} {
			require.Equal(t, "waiting_children", e.state(t, id))
		}

		e.succeed(t, a, "ra")
		res := cascade(t, r, fid, a)
		assert.Equal(t, depresolve.Result{Resolved: 2, Satisfied: 2}, res)
		assert.True(t, e.eligible(t, b))
		assert.True(t, e.eligible(t, c))
		assert.Equal(t, "waiting_children", e.state(t, d))

		e.succeed(t, b, "rb")
		res = cascade(t, r, fid, b)
		assert.Equal(t, depresolve.Result{Resolved: 1, Satisfied: 1}, res)
		assert.Equal(t, "waiting_children", e.state(t, d))
		assert.False(t, e.eligible(t, d))

		e.succeed(t, c, "rc")
		res = cascade(t, r, fid, c)
		assert.Equal(t, depresolve.Result{Resolved: 1, Satisfied: 1}, res)
		assert.Equal(t, "waiting", e.state(t, d))
		assert.True(t, e.eligible(t, d))
		assert.Equal(t, "rc", e.payload(t, d))

		// A duplicate completion (pub/sub redelivery, the reconciler) is
		// harmless and counted as already resolved.
		res = cascade(t, r, fid, c)
		assert.Equal(t, depresolve.Result{Resolved: 1, AlreadyResolved: 1}, res)
	})
}

// A -> B -> C: A failing makes B impossible (skipped) and the cascade
// carries the skip on to C.
func TestFailureSkipsAndCascades(t *testing.T) {
	executors(t, func(t *testing.T, e *env, ex depresolve.Executor) {
		r := depresolve.New(ex, depresolve.Options{})
		fid := e.flow(t)
		a, b, c := e.member(t, fid, "a"), e.member(t, fid, "b"), e.member(t, fid, "c")
		e.edge(t, fid, a, b, "")
		e.edge(t, fid, b, c, "")
		e.fail(t, a)
		res := cascade(t, r, fid, a)
		// b and c are both visited after being skipped (c has no edges).
		assert.Equal(t, depresolve.Result{Resolved: 2, Impossible: 2, Skipped: 2, Cascaded: 2}, res)
		assert.Equal(t, "skipped", e.state(t, b))
		assert.Equal(t, "skipped", e.state(t, c))
		assert.False(t, e.eligible(t, c))
		_, err := e.vk.Do(e.ctx, e.vk.B().Zscore().Key(keys.FlowPart(c.Partition()).LaneTerminal("default")).Member(c.String()).Build()).AsFloat64()
		assert.NoError(t, err)

		// The skip's own completion message arrives later: idempotent.
		res = cascade(t, r, fid, b)
		assert.Equal(t, depresolve.Result{Resolved: 1, AlreadyResolved: 1}, res)
	})
}

// An upstream that is not terminal (never finished, or replayed and
// running again) is left alone: FlowFabric would resolve its edges with
// outcome "none" and skip the child.
func TestNonTerminalUpstreamIsLeftAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := depresolve.New(e.direct, depresolve.Options{})
	fid := e.flow(t)
	a, b := e.member(t, fid, "a"), e.member(t, fid, "b")
	e.edge(t, fid, a, b, "")
	_, err := flowtest.Claim(e.ctx, e.lib, a)
	require.NoError(t, err)
	res := cascade(t, r, fid, a)
	assert.Equal(t, depresolve.Result{NotTerminal: 1}, res)
	assert.Equal(t, "waiting_children", e.state(t, b))
}

// A 10-level chain resolves level to level: each completion releases
// exactly the next execution.
func TestTenLevelChainResolvesLevelByLevel(t *testing.T) {
	executors(t, func(t *testing.T, e *env, ex depresolve.Executor) {
		r := depresolve.New(ex, depresolve.Options{})
		fid := e.flow(t)
		chain := make([]keys.ExecutionID, 10)
		for i := range chain {
			chain[i] = e.member(t, fid, fmt.Sprint(i))
			if i > 0 {
				e.edge(t, fid, chain[i-1], chain[i], "carry")
			}
		}
		for i := range chain {
			require.True(t, e.eligible(t, chain[i]), "level %d must be claimable", i)
			for _, later := range chain[i+1:] {
				require.Equal(t, "waiting_children", e.state(t, later))
			}
			e.succeed(t, chain[i], fmt.Sprintf("out-%d", i))
			res := cascade(t, r, fid, chain[i])
			if i == len(chain)-1 {
				assert.Equal(t, depresolve.Result{}, res)
				continue
			}
			assert.Equal(t, depresolve.Result{Resolved: 1, Satisfied: 1}, res, "level %d", i)
			assert.Equal(t, fmt.Sprintf("out-%d", i), e.payload(t, chain[i+1]))
		}
		assert.Equal(t, "completed", e.state(t, chain[9]))
	})
}

// A skip cascade deeper than MaxDepth stops, reports the last skipped
// child for the reconciler, and the reconciler finishes the chain.
func TestDepthLimitLeavesTheRestToTheReconciler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := depresolve.New(e.direct, depresolve.Options{MaxDepth: 3})
	fid := e.flow(t)
	chain := make([]keys.ExecutionID, 7)
	for i := range chain {
		chain[i] = e.member(t, fid, "")
		if i > 0 {
			e.edge(t, fid, chain[i-1], chain[i], "")
		}
	}
	e.fail(t, chain[0])
	res := cascade(t, r, fid, chain[0])
	// Depths 0..3 resolve chain[1..4]; chain[4]'s edges are beyond the limit.
	assert.Equal(t, depresolve.Result{Resolved: 4, Impossible: 4, Skipped: 4, Cascaded: 3, Left: []keys.ExecutionID{chain[4]}}, res)
	for _, id := range chain[1:5] {
		assert.Equal(t, "skipped", e.state(t, id))
	}
	assert.Equal(t, "waiting_children", e.state(t, chain[5]))

	// The reconciler resolves chain[5] and cascades on to chain[6].
	res, err := r.ReconcileChild(e.ctx, chain[5])
	require.NoError(t, err)
	assert.Equal(t, depresolve.Result{Resolved: 2, Impossible: 2, Skipped: 2, Cascaded: 2}, res)
	assert.Equal(t, "skipped", e.state(t, chain[5]))
	assert.Equal(t, "skipped", e.state(t, chain[6]))
}

// The reconciler repairs lost pushes: it reads every unresolved edge (here
// 25, more than FlowFabric's 20), the upstreams' real outcomes, and
// resolves the finished ones; unfinished upstreams are counted and left.
func TestReconcileResolvesAllFinishedEdges(t *testing.T) {
	executors(t, func(t *testing.T, e *env, ex depresolve.Executor) {
		r := depresolve.New(ex, depresolve.Options{})
		fid := e.flow(t)
		child := e.member(t, fid, "child")
		var ups []keys.ExecutionID
		for i := 0; i < 26; i++ {
			u := e.member(t, fid, "")
			e.edge(t, fid, u, child, "")
			ups = append(ups, u)
		}
		for _, u := range ups[:25] {
			e.succeed(t, u, "")
		}
		other := e.member(t, fid, "other") // blocked on a running upstream
		e.edge(t, fid, ups[25], other, "")

		res, err := r.ReconcileChildren(e.ctx, []keys.ExecutionID{child, other})
		require.NoError(t, err)
		assert.Equal(t, depresolve.Result{Resolved: 25, Satisfied: 25, NotTerminal: 2}, res)
		assert.Equal(t, "waiting_children", e.state(t, child))

		e.succeed(t, ups[25], "")
		res, err = r.ReconcileChildren(e.ctx, []keys.ExecutionID{child, other})
		require.NoError(t, err)
		assert.Equal(t, depresolve.Result{Resolved: 2, Satisfied: 2}, res)
		assert.True(t, e.eligible(t, child))
		assert.True(t, e.eligible(t, other))

		// Nothing left to do: both are eligible, with no unresolved edge.
		res, err = r.ReconcileChildren(e.ctx, []keys.ExecutionID{child, other})
		require.NoError(t, err)
		assert.Equal(t, depresolve.Result{}, res)
	})
}

// A child whose edges are all resolved but which is still blocked (a
// release that never happened) is promoted.
func TestReconcilePromotesAStuckChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := depresolve.New(e.plugin, depresolve.Options{})
	fid := e.flow(t)
	a, b := e.member(t, fid, "a"), e.member(t, fid, "b")
	e.edge(t, fid, a, b, "")
	e.succeed(t, a, "")
	cascade(t, r, fid, a)
	require.True(t, e.eligible(t, b))
	// Put b back into blocked:dependencies by hand.
	pk := keys.FlowPart(b.Partition())
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Hset().Key(keys.Exec(b).Core()).FieldValue().
		FieldValue("eligibility_state", "blocked_by_dependencies").FieldValue("public_state", "waiting_children").Build()).Error())
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Zrem().Key(pk.LaneEligible("default")).Member(b.String()).Build()).Error())
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Zadd().Key(pk.LaneBlockedDependencies("default")).ScoreMember().ScoreMember(1, b.String()).Build()).Error())

	res, err := r.ReconcileChild(e.ctx, b)
	require.NoError(t, err)
	assert.Equal(t, depresolve.Result{Promoted: 1}, res)
	assert.True(t, e.eligible(t, b))
	assert.Equal(t, "waiting", e.state(t, b))
}

// Failures are counted, never swallowed, and do not stop the other edges:
// a child whose core cannot be read, an edge staged but never applied
// (invalid_dependency), an upstream whose read fails (not remembered as
// "not terminal").
func TestErrorsAreCountedAndIsolated(t *testing.T) {
	executors(t, func(t *testing.T, e *env, ex depresolve.Executor) {
		r := depresolve.New(ex, depresolve.Options{})
		fid := e.flow(t)
		a, ok1, broken, unapplied := e.member(t, fid, "a"), e.member(t, fid, "ok"), e.member(t, fid, "broken"), e.member(t, fid, "unapplied")
		e.edge(t, fid, a, ok1, "")
		e.edge(t, fid, a, broken, "")
		stageOnly(t, e, fid, a, unapplied)
		wrongType(t, e, keys.Exec(broken).Core())
		e.succeed(t, a, "")

		res := cascade(t, r, fid, a)
		assert.Equal(t, int64(1), res.Satisfied)
		assert.ElementsMatch(t, []scannerapi.ErrorCount{
			{Class: scannerapi.ErrServer, Code: "read_child", Count: 1},
			{Class: scannerapi.ErrLua, Code: "invalid_dependency", Count: 1},
		}, res.Errors)
		assert.True(t, e.eligible(t, ok1))

		// Reconcile a child whose upstream's core is unreadable: an error,
		// and the edge stays unresolved for the next pass.
		up, child := e.member(t, fid, "up"), e.member(t, fid, "child")
		e.edge(t, fid, up, child, "")
		wrongType(t, e, keys.Exec(up).Core())
		res, err := r.ReconcileChild(e.ctx, child)
		require.NoError(t, err)
		assert.Equal(t, depresolve.Result{Errors: []scannerapi.ErrorCount{{Class: scannerapi.ErrServer, Code: "read_upstream", Count: 1}}}, res)
		assert.Equal(t, int64(1), res.ErrorTotal())
	})
}

// Both executors produce identical results for the same scenario.
func TestExecutorsAgree(t *testing.T) {
	var mu sync.Mutex
	traces := map[string][]string{}
	executors(t, func(t *testing.T, e *env, ex depresolve.Executor) {
		r := depresolve.New(ex, depresolve.Options{})
		fid := e.flow(t)
		a, b, c, d, x := e.member(t, fid, "a"), e.member(t, fid, "b"), e.member(t, fid, "c"), e.member(t, fid, "d"), e.member(t, fid, "x")
		e.edge(t, fid, a, b, "")
		e.edge(t, fid, a, c, "p")
		e.edge(t, fid, b, d, "")
		e.edge(t, fid, c, d, "")
		e.edge(t, fid, d, x, "")
		var trace []string
		step := func(res depresolve.Result) {
			trace = append(trace, fmt.Sprintf("%+v", res))
			for _, id := range []keys.ExecutionID{a, b, c, d, x} {
				trace = append(trace, e.state(t, id))
			}
		}
		e.succeed(t, a, "ra")
		step(cascade(t, r, fid, a))
		trace = append(trace, e.payload(t, c))
		e.fail(t, b)
		step(cascade(t, r, fid, b))
		e.succeed(t, c, "rc")
		step(cascade(t, r, fid, c))
		res, err := r.ReconcileChildren(e.ctx, []keys.ExecutionID{d, x})
		require.NoError(t, err)
		step(res)
		mu.Lock()
		traces[t.Name()] = trace
		mu.Unlock()
	})
	var all [][]string
	for _, tr := range traces {
		all = append(all, tr)
	}
	require.Len(t, all, 2)
	assert.Equal(t, all[0], all[1])
	assert.Contains(t, all[0], "skipped") // b's failure skipped d and x
}

func TestParseCompletion(t *testing.T) {
	fid := keys.NewFlowID()
	eid := keys.NewExecutionIDForFlow(keys.DefaultPartitionConfig(), fid)
	c, err := depresolve.ParseCompletion([]byte(fmt.Sprintf(`{"flow_id":%q,"outcome":"success","execution_id":%q}`, fid, eid)))
	require.NoError(t, err)
	assert.Equal(t, depresolve.Completion{Execution: eid, Flow: fid, Outcome: "success"}, c)
	for _, bad := range []string{`{`, `{"execution_id":"x","flow_id":"` + fid.String() + `"}`, `{"execution_id":"` + eid.String() + `","flow_id":"nope"}`} {
		_, err := depresolve.ParseCompletion([]byte(bad))
		assert.Error(t, err, bad)
	}
}

// stageOnly stages an edge without applying it to the child (a producer
// that crashed in between).
func stageOnly(t *testing.T, e *env, fid keys.FlowID, up, down keys.ExecutionID) {
	t.Helper()
	s, err := e.c.ReadFlow(e.ctx, fid)
	require.NoError(t, err)
	fk := keys.Flow(e.c.Partitions(), fid)
	edge := keys.NewUUID()
	res := e.lib.Do(e.ctx, lua.Call{
		Function: "ff_stage_dependency_edge",
		Keys:     []string{fk.Core(), fk.Members(), fk.Edge(edge), fk.Out(up), fk.In(down), fk.Grant(edge)},
		Args:     []string{fid.String(), edge.String(), up.String(), down.String(), "success_only", "", fmt.Sprint(s.GraphRevision), "1"},
	})
	arr, err := res.ToArray()
	require.NoError(t, err)
	flag, _ := arr[0].AsInt64()
	require.Equal(t, int64(1), flag)
}

// wrongType replaces a hash with a string so that reading it fails.
func wrongType(t *testing.T, e *env, key string) {
	t.Helper()
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Del().Key(key).Build()).Error())
	require.NoError(t, e.vk.Do(e.ctx, e.vk.B().Set().Key(key).Value("x").Build()).Error())
}
