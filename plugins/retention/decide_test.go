package retention

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func TestClassifyMember(t *testing.T) {
	t.Parallel()
	for m, want := range map[string]keys.IDForm{
		"{fp:5}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":  keys.IDCanonical,
		"{fp:05}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f": keys.IDNonCanonical,
		"{fp:5}:0B0C6A4E-5B1D-4C3E-9F00-3D2B1A0C9E8F":  keys.IDNonCanonical,
		"{fp:5}:x":                             keys.IDInvalid,
		"0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f": keys.IDInvalid,
		"":                                     keys.IDInvalid,
		"{fp:70000}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f": keys.IDInvalid,
	} {
		_, got := keys.ClassifyExecutionID(m)
		assert.Equal(t, want, got, "%q", m)
	}
}

func TestRetentionOf(t *testing.T) {
	t.Parallel()
	r := retention{def: 24 * time.Hour, min: time.Hour}
	day, hour := (24 * time.Hour).Milliseconds(), time.Hour.Milliseconds()
	cases := []struct {
		policy    string
		hasPolicy bool
		want      int64
		override  bool
	}{
		{"", false, day, false},
		{"{}", true, day, false},
		{`{"stream_policy":{}}`, true, day, false},
		{`{"stream_policy":{"retention_ttl_ms":7200000}}`, true, 7_200_000, true},         // shorter: honoured
		{`{"stream_policy":{"retention_ttl_ms":172800000}}`, true, 172_800_000, true},     // longer: honoured
		{`{"stream_policy":{"retention_ttl_ms":60000}}`, true, hour, true},                // below the floor: the floor
		{`{"stream_policy":{"retention_ttl_ms":0}}`, true, hour, true},                    // "at once": the floor
		{`{"stream_policy":{"retention_ttl_ms":-5}}`, true, day, false},                   // not a u64: default
		{`{"stream_policy":{"retention_ttl_ms":3600000.5}}`, true, day, false},            // fractional: default
		{`{"stream_policy":{"retention_ttl_ms":"7200000"}}`, true, day, false},            // a string: default
		{`{"stream_policy":{"retention_ttl_ms":null}}`, true, day, false},                 // null: default
		{`{"stream_policy":null}`, true, day, false},                                      // null: default
		{`not json`, true, day, false},                                                    // unparsable: default
		{`{"stream_policy":{"retention_ttl_ms":99999999999999999999}}`, true, day, false}, // overflows u64: default
		{`{"stream_policy":{"retention_ttl_ms":18446744073709551615}}`, true, maxRetentionMs, true},
		{`{"max_retries":3,"stream_policy":{"mode":"summary","retention_ttl_ms":7200000}}`, true, 7_200_000, true},
	}
	for _, c := range cases {
		got, override := r.of(c.policy, c.hasPolicy)
		assert.Equal(t, c.want, got, c.policy)
		assert.Equal(t, c.override, override, c.policy)
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	r := retention{def: 24 * time.Hour, min: time.Hour}
	now := int64(1_000_000_000_000)
	day := (24 * time.Hour).Milliseconds()
	base := examined{inIndex: true, score: float64(now - day - 1), coreExists: true, phase: "terminal", kept: true}

	e := base
	e.completed = "0"
	assert.Equal(t, vPurge, decide(e, now, r).kind, "no completed_at: the index score counts")

	e = base
	e.completed = itoa(now - day + 10)
	assert.Equal(t, verdict{kind: vKept, dueAt: now + 10}, decide(e, now, r), "completed_at wins over the score")

	e = base
	e.completed = itoa(now - 3*time.Hour.Milliseconds())
	e.hasPolicy, e.policy = true, `{"stream_policy":{"retention_ttl_ms":7200000}}`
	assert.Equal(t, vPurge, decide(e, now, r).kind, "a shorter override is honoured")

	e = base
	e.completed = itoa(now - 2*day)
	e.hasPolicy, e.policy = true, `{"stream_policy":{"retention_ttl_ms":259200000}}`
	assert.Equal(t, verdict{kind: vKept, dueAt: now + day}, decide(e, now, r), "a longer override is honoured")

	e = base
	e.phase = "runnable"
	assert.Equal(t, vNotTerminal, decide(e, now, r).kind, "never touch a non-terminal execution")

	e = base
	e.kept = false
	assert.Equal(t, vFiltered, decide(e, now, r).kind)

	e = base
	e.coreExists, e.kept = false, false
	assert.Equal(t, vClean, decide(e, now, r).kind, "a gone core is cleaned whatever the filter")

	e = base
	e.inIndex = false
	assert.Equal(t, vLeft, decide(e, now, r).kind)

	e = base
	e.completed = itoa(now)
	e.hasPolicy, e.policy = true, `{"stream_policy":{"retention_ttl_ms":18446744073709551615}}`
	assert.Equal(t, verdict{kind: vKept, dueAt: now + maxRetentionMs}, decide(e, now, r))
	assert.Equal(t, int64(math.MaxInt64), satAdd(math.MaxInt64-1, 5))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestKeysOfListsEveryKeyCoreLast(t *testing.T) {
	t.Parallel()
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 9}, keys.NewUUID())
	require.NoError(t, err)
	edge, wp, wp2, sig := keys.NewUUID(), keys.NewUUID(), keys.NewUUID(), keys.NewUUID()
	e := examined{
		attempts:   "2",
		attemptIDs: []string{"0", "1", "3", "x", "01"},
		edges:      []string{edge.String(), "NOT-CANONICAL"},
		waitpoints: []string{wp.String()},
		waitpoint:  wp2.String(),
		signals:    []string{sig.String(), strings.ToUpper(sig.String())},
	}
	pk, err := keysOf(id, e)
	require.NoError(t, err)
	ek, fk := keys.Exec(id), keys.FlowPart(id.Partition())
	for _, i := range []uint32{0, 1, 3} {
		for _, k := range []string{ek.Attempt(i), ek.AttemptUsage(i), ek.AttemptPolicy(i), ek.AttemptSummary(i), ek.Stream(i), ek.StreamMeta(i)} {
			assert.Contains(t, pk.leaves, k)
		}
	}
	assert.NotContains(t, pk.leaves, ek.Attempt(2), "neither counted nor listed")
	for _, k := range []string{
		ek.Dep(edge), fk.Waitpoint(wp), fk.WaitpointSignals(wp), fk.WaitpointCondition(wp),
		fk.Waitpoint(wp2), fk.WaitpointSignals(wp2), fk.WaitpointCondition(wp2),
		fk.Signal(sig), fk.SignalPayload(sig),
		ek.Payload(), ek.Result(), ek.Tags(), ek.LeaseCurrent(), ek.LeaseHistory(), ek.ClaimGrant(),
		ek.SuspensionCurrent(), ek.SuspensionSatisfiedSet(), ek.SuspensionSatisfiedSignals(), ek.SuspensionMemberMap(),
		ek.DepsMeta(), ek.DepsUnresolved(),
	} {
		assert.Contains(t, pk.leaves, k)
	}
	assert.Equal(t, []string{ek.DepsAllEdges(), ek.Waitpoints(), ek.Signals(), ek.Attempts(), ek.Core(), ek.Policy()}, pk.last,
		"the listing sets, then core and policy, go last")
	for _, k := range pk.last {
		assert.NotContains(t, pk.leaves, k)
	}
	assert.Equal(t, 2, pk.nonCanonical)
	for _, k := range append(pk.leaves, pk.last...) {
		assert.Equal(t, keys.ClusterSlot(ek.Core()), keys.ClusterSlot(k), k)
		assert.True(t, strings.HasPrefix(k, keys.Prefix))
	}

	_, err = keysOf(id, examined{attempts: "99999999"})
	assert.Error(t, err)
	_, err = keysOf(id, examined{attempts: "abc"})
	assert.Error(t, err)
}

func TestChunks(t *testing.T) {
	t.Parallel()
	ks := make([]string, 250)
	c := chunks(ks, 100)
	require.Len(t, c, 3)
	assert.Len(t, c[2], 50)
	assert.Empty(t, chunks(nil, 100))
}

func TestConfigureValidates(t *testing.T) {
	t.Parallel()
	s := New()
	ctx := t.Context()
	require.NoError(t, s.Configure(ctx, map[string]string{"default_retention": "48h", "min_retention": "10m", "lookahead": "10"}))
	assert.Equal(t, retention{def: 48 * time.Hour, min: 10 * time.Minute}, s.cfg.ret)
	assert.Error(t, s.Configure(ctx, map[string]string{"min_retention": "30s"}), "below the floor")
	assert.Error(t, s.Configure(ctx, map[string]string{"default_retention": "30m"}), "shorter than min_retention")
	assert.Error(t, s.Configure(ctx, map[string]string{"default_retention": "soon"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"lookahead": "-1"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"nope": "1"}))
	assert.Equal(t, 48*time.Hour, s.cfg.ret.def, "a rejected configuration keeps the old one")
	require.NoError(t, scannerapi.ValidateInfo(s.Info()))
}

func TestDueMemos(t *testing.T) {
	t.Parallel()
	s := New()
	const a, b, c = "{fp:1}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f", "{fp:1}:1b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f", "{fp:1}:2b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f"
	stored, _ := s.memo.Remember(1, a, 5, memo{lane: "l", dueAt: 100}, 10, 0)
	require.True(t, stored)
	s.memo.Remember(1, b, 4, memo{lane: "l", dueAt: 50}, 10, 0)
	s.memo.Remember(1, c, 3, memo{lane: "l", recheck: 20}, 10, 0)
	due, total := s.dueMemos(1, 60, 10, 10)
	assert.Equal(t, 1, total, "only the one due at 50 by server time 60")
	assert.Equal(t, b, due[0].member)
	due, total = s.dueMemos(1, 100, 20, 1)
	assert.Equal(t, 3, total)
	assert.Len(t, due, 1)
	assert.Equal(t, float64(3), due[0].score, "oldest first")
	assert.Equal(t, "l", due[0].lane)
	assert.Empty(t, s.memo.Entries(2, 20, nil), "entries are per partition")
	assert.True(t, memoDue(memo{recheck: 100}, 0, 5), "a host that restarted counting releases it")
}
