package audit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// A write names its execution by its keys, or by an index member among
// its arguments; its entry goes to that partition's stream, and an
// operator's to the host-wide one.
func TestEntriesFindTheirExecutionAndStream(t *testing.T) {
	t.Parallel()
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 6}, keys.NewUUID())
	require.NoError(t, err)
	fcall := shadow.Decision{Command: "FCALL ff_mark_lease_expired_if_due", Keys: []string{keys.Exec(id).Core(), "x"}, Args: []string{id.String()}}
	e := ScannerEntry(time.Time{}, "lease_expiry", "abc", fcall, Acted)
	assert.Equal(t, id.String(), e.Execution)
	assert.Equal(t, "ffscan:audit:{fp:6}", streamOf(e))
	zrem := shadow.Decision{Command: "ZREM", Keys: []string{keys.FlowPart(id.Partition()).LaneTerminal("default")}, Args: []string{id.String()}}
	assert.Equal(t, id.String(), ScannerEntry(time.Time{}, "r", "", zrem, Acted).Execution)
	budget := shadow.Decision{Command: "FCALL ff_reset_budget", Keys: []string{"ff:budget:{b:3}:x"}}
	e = ScannerEntry(time.Time{}, "budget_reset", "", budget, Acted)
	assert.Empty(t, e.Execution)
	assert.Equal(t, "ffscan:audit:{b:3}", streamOf(e))
	assert.Equal(t, OperatorStream, streamOf(Operator(context.Background(), "reload", "", "")))
	assert.Equal(t, Actor{Channel: ChannelHost}, ActorFrom(context.Background()))
	assert.Equal(t, "", hashTag("ff:{fp:x}:y"))
	assert.Equal(t, "", hashTag("{other:1}"))
}

// A PGCALL names its execution by its partition key and bare uuid
// (FlowFabric's Postgres tables hold no "{fp:N}:" id): the entry names
// it as the API does, and on a host with Valkey too it goes to that
// partition's stream. A function whose arguments name no execution (a
// waitpoint, a budget, an event), or malformed arguments, name none.
func TestPGCallEntriesFindTheirExecution(t *testing.T) {
	t.Parallel()
	u := "6ba7b810-9dad-41d1-80b4-00c04fd430c8"
	for _, c := range []struct {
		d    shadow.Decision
		want string
	}{
		{shadow.Decision{Command: "PGCALL expire_lapsed_lease", Args: []string{"86", u, "0"}}, "{fp:86}:" + u},
		{shadow.Decision{Command: "PGCALL release_stale_lease", Args: []string{"3", strings.ToUpper(u), "1"}}, "{fp:3}:" + u},
		{shadow.Decision{Command: "PGCALL expire_execution_deadline", Args: []string{"0", u}}, "{fp:0}:" + u},
		{shadow.Decision{Command: "PGCALL promote_delayed", Args: []string{"255", u}}, "{fp:255}:" + u},
		{shadow.Decision{Command: "PGCALL expire_suspension", Args: []string{"4", u, "00000000-0000-4000-8000-000000000001"}}, "{fp:4}:" + u},
		{shadow.Decision{Command: "PGCALL dispatch_sibling_cancels", Args: []string{"5", "00000000-0000-4000-8000-000000000001", u}}, "{fp:5}:" + u},
		{shadow.Decision{Command: "PGCALL reconcile_sibling_cancels", Args: []string{"5", "00000000-0000-4000-8000-000000000001", u}}, "{fp:5}:" + u},
		{shadow.Decision{Command: "PGCALL expire_pending_waitpoint", Args: []string{"5", u}}, ""},
		{shadow.Decision{Command: "PGCALL reset_budget", Args: []string{"1", "budget-1"}}, ""},
		{shadow.Decision{Command: "PGCALL dispatch_completion", Args: []string{"5", "17"}}, ""},
		{shadow.Decision{Command: "PGCALL sweep_worker", Args: []string{"5", "3/[\"ns\", \"i\"]"}}, ""},
		{shadow.Decision{Command: "PGCALL expire_lapsed_lease", Args: []string{"x", u, "0"}}, ""},
		{shadow.Decision{Command: "PGCALL expire_lapsed_lease", Args: []string{"70000", u, "0"}}, ""},
		{shadow.Decision{Command: "PGCALL expire_lapsed_lease", Args: []string{"5", "not-a-uuid", "0"}}, ""},
		{shadow.Decision{Command: "PGCALL expire_lapsed_lease", Args: []string{"5"}}, ""},
		{shadow.Decision{Command: "ZREM", Args: []string{"5", u}}, ""},
	} {
		e := ScannerEntry(time.Time{}, "pg_lease_expiry", "", c.d, Acted)
		assert.Equal(t, c.want, e.Execution, "%s %v", c.d.Command, c.d.Args)
		if c.want != "" {
			assert.Equal(t, "ffscan:audit:"+c.want[:strings.Index(c.want, "}")+1], streamOf(e))
		}
	}
}

// What the recorder writes it reads back, newest first, filtered; a full
// queue drops (and counts) instead of blocking; the text of an entry is
// bounded.
func TestRecorderWritesAndQueries(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	parts := keys.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
	r := New(c, Config{Host: "h1", Partitions: parts, Queue: 4})
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 2}, keys.NewUUID())
	require.NoError(t, err)
	d := shadow.Decision{Command: "FCALL f", Keys: []string{keys.Exec(id).Core()}}
	// Not started: the queue of 4 fills, the rest is dropped and counted.
	for range 6 {
		r.Record(ScannerEntry(time.Time{}, "s", "0123456789abcdef0123", d, Acted))
	}
	assert.Equal(t, uint64(2), r.Stats().Dropped)
	ctx := context.Background()
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Stop(ctx), "a stop writes what is queued")
	assert.Equal(t, uint64(4), r.Stats().Written)
	ops := New(c, Config{Host: "h1", Partitions: parts})
	ops.Record(Operator(WithActor(ctx, Actor{Channel: ChannelCLI, Who: TokenIdentity("t")}), "enable", "s", string(make([]byte, 5000))))
	require.NoError(t, ops.Start(ctx))
	require.NoError(t, ops.Stop(ctx))

	got, err := r.Query(ctx, Filter{Execution: id.String()})
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.Equal(t, "0123456789abcdef", got[0].Digest)
	assert.Equal(t, "h1", got[0].Host)
	assert.Empty(t, got[0].Key, "the execution names it")
	assert.False(t, got[0].At.IsZero())
	all, err := r.Query(ctx, Filter{Kind: KindOperator})
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, ChannelCLI, all[0].Channel)
	assert.Less(t, len(all[0].Detail), 600, "bounded")
	limited, err := r.Query(ctx, Filter{Limit: 2})
	require.NoError(t, err)
	assert.Len(t, limited, 2)
	assert.False(t, idLess(limited[0].ID, limited[1].ID), "newest first")
	_, err = r.Query(ctx, Filter{Execution: "nope"})
	assert.Error(t, err)
}

// One call's actions on a partition share a stream entry (one append,
// the shared fields once); each reads back as its own entry with its own
// item and outcome, whatever text the item holds.
func TestOneCallsActionsShareAStreamEntry(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	parts := keys.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
	r := New(c, Config{Host: "h1", Partitions: parts})
	part := keys.Partition{Family: keys.FamilyFlow, Index: 1}
	var ids []keys.ExecutionID
	outcomes := []string{Acted, AlreadyDone, Refused, Failed}
	const n = maxItems + 3 // two stream entries
	for i := range n {
		id, err := keys.ExecutionIDIn(part, keys.NewUUID())
		require.NoError(t, err)
		ids = append(ids, id)
		d := shadow.Decision{Command: "FCALL ff_mark_lease_expired_if_due", Keys: []string{keys.Exec(id).Core()}}
		r.Record(ScannerEntry(time.Time{}, "lease_expiry", "0123456789abcdef", d, outcomes[i%len(outcomes)]))
	}
	// A key with no execution, with a space and a line break in it; and
	// another scanner's action on the same partition.
	odd := "ff:idx:{fp:1}:odd key\nsecond line"
	r.Record(ScannerEntry(time.Time{}, "lease_expiry", "0123456789abcdef", shadow.Decision{Command: "FCALL ff_mark_lease_expired_if_due", Keys: []string{odd}}, Acted))
	// Recorded from a reply's path: the key and execution are read by the
	// writer, to the same entry.
	r.RecordWrite("attempt_timeout", "fedcba9876543210", shadow.Decision{Command: "FCALL ff_expire_execution", Keys: []string{keys.Exec(ids[0]).Core()}}, Acted)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Stop(ctx))
	assert.Equal(t, uint64(n+2), r.Stats().Written)

	streamLen, err := c.Do(ctx, c.B().Xlen().Key("ffscan:audit:"+part.Tag()).Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(3), streamLen, "lease_expiry's %d actions in two entries, attempt_timeout's in one", n+1)

	got, err := r.Query(ctx, Filter{Scanner: "lease_expiry", Limit: 1000})
	require.NoError(t, err)
	require.Len(t, got, n+1)
	byExec := map[string]Entry{}
	var keyed []Entry
	for _, e := range got {
		assert.Equal(t, "h1", e.Host)
		assert.Equal(t, "0123456789abcdef", e.Digest)
		assert.Equal(t, "FCALL ff_mark_lease_expired_if_due", e.Command)
		assert.False(t, e.At.IsZero())
		if e.Execution == "" {
			keyed = append(keyed, e)
			continue
		}
		byExec[e.Execution] = e
	}
	for i, id := range ids {
		assert.Equal(t, outcomes[i%len(outcomes)], byExec[id.String()].Outcome, "item %d", i)
	}
	require.Len(t, keyed, 1)
	assert.Contains(t, keyed[0].Key, "odd key")
	assert.NotContains(t, keyed[0].Key, "\n")

	one, err := r.Query(ctx, Filter{Execution: ids[0].String()})
	require.NoError(t, err)
	require.Len(t, one, 2, "lease_expiry's and attempt_timeout's")
	assert.Equal(t, "attempt_timeout", one[0].Scanner, "newest first")
}

// On a host with Valkey and Postgres the trail is in Valkey: a PGCALL's
// entry is in its execution's partition stream, found by the execution's
// id like the execution's Valkey actions.
func TestValkeyTrailFindsAPGCallByExecution(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	r := New(srv.Client(t), Config{Host: "h1", Partitions: keys.PartitionConfig{Flow: 16, Budget: 2, Quota: 2}})
	u := "6ba7b810-9dad-41d1-80b4-00c04fd430c8"
	lapsed := shadow.Decision{Command: "PGCALL expire_lapsed_lease", Args: []string{"9", u, "0"}}
	r.Record(ScannerEntry(time.Time{}, "pg_lease_expiry", "", lapsed, Acted))
	ctx := context.Background()
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Stop(ctx))
	assert.Equal(t, Stats{Store: "valkey", Written: 1}, r.Stats())
	got, err := r.Query(ctx, Filter{Execution: "{fp:9}:" + u})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "PGCALL expire_lapsed_lease", got[0].Command)
	assert.Equal(t, "pg_lease_expiry", got[0].Scanner)
}
