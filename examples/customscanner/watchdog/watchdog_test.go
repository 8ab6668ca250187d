package watchdog_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/examples/customscanner/watchdog"
	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// The decision logic alone: which candidates are stuck.
func TestSelect(t *testing.T) {
	part := keys.Partition{Family: keys.FamilyFlow, Index: 3}
	id, err := keys.ExecutionIDIn(part, keys.NewUUID())
	require.NoError(t, err)
	other, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 4}, keys.NewUUID())
	require.NoError(t, err)
	now := int64(10 * time.Hour / time.Millisecond)
	hour := float64(time.Hour / time.Millisecond)
	old, invalid, young := watchdog.Select([]scannerapi.Candidate{
		{Member: id.String(), Score: float64(now) - 2*hour}, // stuck
		{Member: id.String(), Score: float64(now) - hour},   // exactly max_age: stuck
		{Member: id.String(), Score: float64(now) - hour/2}, // due, not for long
		{Member: "junk", Score: 0},                          // not an id
		{Member: other.String(), Score: 0},                  // another partition's id
	}, part, now, time.Hour)
	assert.Len(t, old, 2)
	assert.Len(t, invalid, 2)
	assert.Equal(t, 1, young)
}

func TestClassify(t *testing.T) {
	str := func(s string) scannerapi.Reply { return scannerapi.Reply{Kind: scannerapi.KindString, Str: s} }
	arr := func(a ...scannerapi.Reply) scannerapi.Reply {
		return scannerapi.Reply{Kind: scannerapi.KindArray, Array: a}
	}
	nilR := scannerapi.Reply{Kind: scannerapi.KindNil}
	for want, r := range map[watchdog.Case]scannerapi.Reply{
		watchdog.CaseOverdue: arr(str("runnable"), str("not_eligible_until_time")),
		watchdog.CaseStale:   arr(str("runnable"), str("eligible_now")),
		watchdog.CaseMissing: arr(nilR, nilR),
	} {
		got, err := watchdog.Classify(r)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := watchdog.Classify(scannerapi.Reply{Kind: scannerapi.KindError, Err: "WRONGTYPE", ErrClass: scannerapi.ErrServer})
	assert.Error(t, err)
}

// fixture is the state every run starts from, on partition 3 of lane
// "default": one execution of each kind. Ids are fixed so that the linked
// and the plugin run leave the same keys.
type fixture struct {
	part                           keys.Partition
	overdue, stale, missing, young keys.ExecutionID
	future                         keys.ExecutionID
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{part: keys.Partition{Family: keys.FamilyFlow, Index: 3}}
	for _, id := range []*keys.ExecutionID{&f.overdue, &f.stale, &f.missing, &f.young, &f.future} {
		var err error
		*id, err = keys.ExecutionIDIn(f.part, keys.NewUUID())
		require.NoError(t, err)
	}
	return f
}

func (f fixture) delayedKey() string { return keys.FlowPart(f.part).LaneDelayed("default") }

// setup creates the executions with the public client, then ages their
// delayed entries as if the promoter had been down for hours.
func (f fixture) setup(t testing.TB, vk valkey.Client) {
	ctx := context.Background()
	c, err := client.New(ctx, vk, client.Options{RequireStoredPartitions: true})
	require.NoError(t, err)
	create := func(id keys.ExecutionID, delay time.Duration) {
		_, err := c.CreateExecution(ctx, client.CreateRequest{ID: id, Lane: "default", Kind: "test", Delay: delay})
		require.NoError(t, err)
	}
	create(f.overdue, time.Hour)
	create(f.young, time.Hour)
	create(f.future, time.Hour)
	create(f.stale, 0) // eligible now: does not belong in the delayed set
	now := time.Now()
	age := func(id string, ago time.Duration) {
		at := strconv.FormatInt(now.Add(-ago).UnixMilli(), 10)
		require.NoError(t, vk.Do(ctx, vk.B().Zadd().Key(f.delayedKey()).ScoreMember().ScoreMember(float64(now.Add(-ago).UnixMilli()), id).Build()).Error())
		if pid, err := keys.ParseExecutionID(id); err == nil {
			_ = vk.Do(ctx, vk.B().Hset().Key(keys.Exec(pid).Core()).FieldValue().FieldValue("delay_until", at).Build()).Error()
		}
	}
	age(f.overdue.String(), 2*time.Hour)
	age(f.stale.String(), 3*time.Hour)
	// No record at all behind this one (HSET above created none: it
	// would, so delete what it made).
	age(f.missing.String(), 4*time.Hour)
	require.NoError(t, vk.Do(ctx, vk.B().Del().Key(keys.Exec(f.missing).Core()).Build()).Error())
	age(f.young.String(), 5*time.Minute)
	require.NoError(t, vk.Do(ctx, vk.B().Zadd().Key(f.delayedKey()).ScoreMember().ScoreMember(float64(now.Add(-5*time.Hour).UnixMilli()), "junk").Build()).Error())
}

func delayedMembers(t testing.TB, vk valkey.Client, key string) []string {
	ms, err := vk.Do(context.Background(), vk.B().Zrange().Key(key).Min("0").Max("-1").Build()).AsStrSlice()
	require.NoError(t, err)
	return ms
}

func field(t testing.TB, vk valkey.Client, id keys.ExecutionID, f string) string {
	v, _ := vk.Do(context.Background(), vk.B().Hget().Key(keys.Exec(id).Core()).Field(f).Build()).ToString()
	return v
}

// The scanner as an operator runs it, with the test kit: linked in-process
// and as the real plugin binary through an ffscan host, against a real
// server with the fixture. Report mode looks and changes nothing.
func TestReportMode(t *testing.T) {
	f := newFixture(t)
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner:  hosttest.Runner{},
		New:     func() scannerapi.Scanner { return watchdog.New() },
		Plugin:  "github.com/ffscan/ffscan/examples/customscanner",
		Options: map[string]string{"max_age": "1h"},
		Setup:   f.setup,
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			t.Log(r)
			assert.Equal(t, 1, r.Scanned, "one partition has candidates; the other 15 cost nothing")
			assert.Equal(t, int64(3), r.Processed, "overdue, stale and missing reported")
			assert.Equal(t, int64(1), r.Skipped, "the young one is the promoter's business")
			assert.Equal(t, map[string]int64{"invalid/stale_entry": 1, "invalid/missing_execution": 1, "invalid/bad_member": 1}, r.Errors)
			assert.Equal(t, map[string]int{"HMGET": 3}, r.Commands, "one batched read")
			assert.Empty(t, r.Refused)
			assert.Len(t, r.Notes, 3)
			assert.Len(t, delayedMembers(t, vk, f.delayedKey()), 6, "report mode changes nothing")
			assert.Equal(t, "not_eligible_until_time", field(t, vk, f.overdue, "eligibility_state"))
		},
	})
	scannertest.Same(t, linked, plugin)
}

// Promote mode repairs through ff_promote_delayed: the overdue execution
// becomes eligible, the stale and missing entries go, the rest stays.
func TestPromoteMode(t *testing.T) {
	f := newFixture(t)
	linked, plugin := scannertest.Run(t, scannertest.Case{
		Runner:  hosttest.Runner{},
		New:     func() scannerapi.Scanner { return watchdog.New() },
		Plugin:  "github.com/ffscan/ffscan/examples/customscanner",
		Options: map[string]string{"max_age": "1h", "action": "promote"},
		Setup:   f.setup,
		Cycles:  2,
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			t.Log(r)
			assert.Equal(t, int64(3), r.Processed, "promoted 1, cleaned 2, and nothing left for the second cycle")
			assert.Equal(t, map[string]int{"FCALL ff_promote_delayed": 3}, r.Commands)
			assert.Equal(t, map[string]int64{"invalid/bad_member": 2}, r.Errors, "the junk member is reported each cycle, never touched")
			assert.ElementsMatch(t, []string{"junk", f.young.String(), f.future.String()}, delayedMembers(t, vk, f.delayedKey()))
			assert.Equal(t, "eligible_now", field(t, vk, f.overdue, "eligibility_state"))
			assert.Equal(t, "eligible_now", field(t, vk, f.stale, "eligibility_state"), "the stale one's record is untouched")
		},
	})
	scannertest.Same(t, linked, plugin)
}

// A dry run in promote mode only reports; the host would refuse an FCALL.
func TestDryRunOnlyReports(t *testing.T) {
	f := newFixture(t)
	linked, _ := scannertest.Run(t, scannertest.Case{
		Runner:  hosttest.Runner{},
		New:     func() scannerapi.Scanner { return watchdog.New() },
		Options: map[string]string{"action": "promote"},
		Setup:   f.setup,
		DryRun:  true,
		Check: func(t testing.TB, r scannertest.Report, vk valkey.Client) {
			assert.Equal(t, map[string]int{"HMGET": 3}, r.Commands)
			assert.Empty(t, r.Refused)
			assert.Len(t, delayedMembers(t, vk, f.delayedKey()), 6)
		},
	})
	assert.Equal(t, int64(3), linked.Processed)
}

func TestConfigureRejectsBadOptions(t *testing.T) {
	w := watchdog.New()
	assert.ErrorContains(t, w.Configure(context.Background(), map[string]string{"max_age": "1s", "action": "report"}), "at least 1m")
	assert.ErrorContains(t, w.Configure(context.Background(), map[string]string{"max_age": "1h", "action": "delete"}), "report or promote")
	assert.NoError(t, w.Configure(context.Background(), map[string]string{"max_age": "2h", "action": "promote"}))
	assert.NoError(t, scannerapi.ValidateInfo(w.Info()))
}
