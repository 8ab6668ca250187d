package host

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Shadow mode holds for the Postgres reconcilers as it does for the
// Valkey scanners: a host (real Postgres, the real pgreconcilers plugin)
// runs pg_lease_expiry and pg_delayed_promoter in mode shadow over
// lapsed leases and due delayed executions planted while it runs. Two
// full cycles after the planting, every row of every FlowFabric table is
// as it was, down to its xmin and ctid (no write, not even one that
// rewrote the same values), and every sequence too; what each cycle held
// back is one PGCALL of the reconciler's action function per planted
// item, no more and no other, and explain says "would act (shadow)" for
// each planted execution and nothing for the decoys next to them.
// Switched to act by a reload, the same plugin acts on every planted
// item, once, and on nothing else: each lease released and fenced with
// its lease event, each delay promoted, every other row untouched.
func TestShadowPostgresReconcilersWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const (
		leases  = pgreconcilers.LeaseExpiryName
		delays  = pgreconcilers.DelayedPromoterName
		release = "release_stale_lease"
		promote = "promote_delayed"
	)
	scanners := func(mode string) map[string]config.Scanner {
		sc := pgScanner()
		sc.Mode = mode
		return map[string]config.Scanner{leases: sc, delays: sc}
	}
	shadowed := scanners(config.ModeShadow)
	h, cfg, db := pgReconcilerHost(t, shadowed[leases], shadowed[delays], nil)

	status := func(name string) (st scannerView) {
		s := statusOf(h, name)
		st.mode, st.cycle, st.processed, st.running = s.Mode, s.Cycle, s.Processed, s.State == "running"
		if s.Shadow != nil {
			st.shadow, st.wouldAct, st.byCommand = true, s.Shadow.WouldAct, s.Shadow.ByCommand
		}
		return st
	}
	// The planting, in one transaction: N lapsed leases on executions
	// that are not active (one whose execution is gone) and M due
	// delays, spread over partitions, with decoys beside them that
	// neither reconciler may touch.
	type planted struct {
		pk   uint16
		uuid string
	}
	stale := []planted{
		{1, "5a000000-0000-4000-8000-000000000001"}, {1, "5a000000-0000-4000-8000-000000000002"},
		{6, "5a000000-0000-4000-8000-000000000003"}, {9, "5a000000-0000-4000-8000-000000000004"},
		{14, "5a000000-0000-4000-8000-000000000005"}, // its execution is gone
	}
	due := []planted{
		{0, "de000000-0000-4000-8000-000000000001"}, {6, "de000000-0000-4000-8000-000000000002"},
		{11, "de000000-0000-4000-8000-000000000003"}, {15, "de000000-0000-4000-8000-000000000004"},
	}
	decoys := []planted{
		{1, "dc000000-0000-4000-8000-000000000001"},  // active, its lease lapsed: attempt_timeout's, not lease_expiry's
		{6, "dc000000-0000-4000-8000-000000000002"},  // terminal, its lease not lapsed
		{0, "dc000000-0000-4000-8000-000000000003"},  // delayed, not due for an hour
		{11, "dc000000-0000-4000-8000-000000000004"}, // eligible, a deadline past: not delayed
	}
	const raw = `'{"namespace": "ns-shadow", "tags": {"cairn.instance_id": "i-shadow"}}'`
	execRow := func(p planted, phase, eligibility, public, deadline string) string {
		return fmt.Sprintf(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
			eligibility_state, public_state, attempt_state, created_at_ms, deadline_at_ms, raw_fields)
			VALUES (%d, '%s', 'default', '%s', 'unowned', '%s', '%s', 'pending', 1, %s, %s)`, p.pk, p.uuid, phase, eligibility, public, deadline, raw)
	}
	attempt := func(p planted, lease string) string {
		return fmt.Sprintf(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
			lease_expires_at_ms, started_at_ms) VALUES (%d, '%s', 0, 'w', 'w-1', 3, %s, 1)`, p.pk, p.uuid, lease)
	}
	var plant []string
	for i, p := range stale {
		if i < len(stale)-1 {
			plant = append(plant, execRow(p, "terminal", "not_applicable", "completed", "NULL"))
		}
		plant = append(plant, attempt(p, "ffscan.now_ms() - 1000"))
	}
	for _, p := range due {
		plant = append(plant, execRow(p, "runnable", "not_eligible_until_time", "delayed", "ffscan.now_ms() - 500"))
	}
	plant = append(plant,
		execRow(decoys[0], "active", "not_applicable", "running", "NULL"), attempt(decoys[0], "ffscan.now_ms() - 1000"),
		execRow(decoys[1], "terminal", "not_applicable", "completed", "NULL"), attempt(decoys[1], "ffscan.now_ms() + 3600000"),
		execRow(decoys[2], "runnable", "not_eligible_until_time", "delayed", "ffscan.now_ms() + 3600000"),
		execRow(decoys[3], "runnable", "eligible_now", "waiting", "ffscan.now_ms() - 500"))
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // nothing once committed
	for _, s := range plant {
		_, err := tx.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	// The state before any cycle could see the planted rows: read in the
	// planting transaction, whose rows keep their xmin and ctid once
	// committed.
	t0 := time.Now()
	before := flowFabricState(t, tx)
	t.Logf("the FlowFabric schema read in %v", time.Since(t0))
	// The cycles that had ended before the planted rows could be seen:
	// the next one may have begun before the commit; the one after that
	// cannot have.
	c0 := map[string]uint64{leases: status(leases).cycle, delays: status(delays).cycle}
	require.NoError(t, tx.Commit(ctx))
	t.Logf("planted %d lapsed leases, %d due delays and %d decoys in %d tables", len(stale), len(due), len(decoys), len(before.rows))

	// Two full cycles of each after the planting.
	waitFor(t, h, 3*time.Minute, "two full shadow cycles of each reconciler after the planting", func() bool {
		return status(leases).cycle >= c0[leases]+3 && status(delays).cycle >= c0[delays]+3
	})
	assert.Equal(t, before, flowFabricState(t, db), "a shadow scanner writes nothing: every FlowFabric row and sequence as planted")

	// What was held back: only the action function, and in the last
	// complete cycle one call per planted item.
	for _, c := range []struct {
		name, fn string
		items    int
		args     int
	}{{leases, release, len(stale), 3}, {delays, promote, len(due), 2}} {
		st := status(c.name)
		assert.Equal(t, config.ModeShadow, st.mode)
		assert.Equal(t, int64(0), st.processed, "%s: a held-back call is not work done", c.name)
		require.True(t, st.shadow, "%s has a shadow record", c.name)
		assert.Equal(t, []string{"PGCALL " + c.fn}, slices.Collect(maps.Keys(st.byCommand)), "%s held back only its action function", c.name)
		assert.GreaterOrEqual(t, st.wouldAct, uint64(2*c.items), "%s: at least two cycles' worth", c.name)
		cycle, held := heldInLastCycle(h, c.name)
		require.Len(t, held, c.items, "%s cycle %d: one held-back call per planted item", c.name, cycle)
		for _, it := range held {
			assert.Equal(t, "PGCALL "+c.fn, it.Command)
			assert.Equal(t, c.args, it.Args, "%s's arguments: partition key, execution (and attempt)", c.fn)
		}
	}

	// Explain names the planted executions as what each would act on,
	// and nothing else.
	verdicts := map[string]map[string]explain.Verdict{} // execution -> scanner -> verdict
	for _, p := range slices.Concat(stale, due, decoys) {
		u, err := keys.ParseUUID(p.uuid)
		require.NoError(t, err)
		id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: p.pk}, u)
		require.NoError(t, err)
		rep, err := h.Explain(ctx, id.String())
		require.NoError(t, err)
		verdicts[p.uuid] = map[string]explain.Verdict{}
		for _, v := range rep.Scanners {
			verdicts[p.uuid][v.Scanner] = v
		}
	}
	for _, c := range []struct {
		name, fn string
		acts     []planted
		member   func(planted) string
	}{
		{leases, release, stale, func(p planted) string { return p.uuid + "/0" }},
		{delays, promote, due, func(p planted) string { return p.uuid }},
	} {
		for _, p := range slices.Concat(stale, due, decoys) {
			v, ok := verdicts[p.uuid][c.name]
			require.True(t, ok, "explain %s: no verdict of %s", p.uuid, c.name)
			if !slices.Contains(c.acts, p) {
				assert.Equal(t, string(scannerapi.VerdictNothing), v.Verdict, "%s on %s: %+v", c.name, p.uuid, v)
				assert.False(t, v.Shadow)
				continue
			}
			assert.Equal(t, string(scannerapi.VerdictActs), v.Verdict, "%s on %s: %+v", c.name, p.uuid, v)
			assert.Equal(t, c.fn, v.Reason)
			assert.True(t, v.Shadow, "%s on %s", c.name, p.uuid)
			assert.True(t, strings.HasPrefix(v.Detail, "would act (shadow)"), v.Detail)
			assert.Contains(t, v.Detail, c.member(p))
		}
	}
	assert.Equal(t, before, flowFabricState(t, db), "explaining writes nothing either")

	// Acting from now on: the same plugin acts on each planted item once.
	next := *cfg
	next.Scanners = scanners(config.ModeAct)
	res, err := h.Reload(ctx, &next, "test")
	require.NoError(t, err)
	t.Logf("reload: %+v", res)
	require.Empty(t, res.Error)
	for _, p := range res.Plugins {
		require.Empty(t, p.Error, "%s: the relaunch in mode act", p.Scanner)
	}
	waitFor(t, h, 3*time.Minute, "every planted item acted on in mode act", func() bool {
		l, d := status(leases), status(delays)
		return l.mode == config.ModeAct && d.mode == config.ModeAct && l.processed >= int64(len(stale)) && d.processed >= int64(len(due))
	})
	// The cycle that acted has ended, and with it every call of the
	// shadow instance. Two more full cycles: nothing more done, nothing
	// more held back.
	held := map[string]uint64{leases: status(leases).wouldAct, delays: status(delays).wouldAct}
	c1 := map[string]uint64{leases: status(leases).cycle, delays: status(delays).cycle}
	waitFor(t, h, 3*time.Minute, "two full act cycles of each after the acting one", func() bool {
		return status(leases).cycle >= c1[leases]+3 && status(delays).cycle >= c1[delays]+3
	})
	for _, n := range []string{leases, delays} {
		assert.Equal(t, held[n], status(n).wouldAct, "%s in mode act holds nothing back", n)
	}
	assert.Equal(t, int64(len(stale)), status(leases).processed, "each lapsed lease released once")
	assert.Equal(t, int64(len(due)), status(delays).processed, "each delay promoted once")

	after := flowFabricState(t, db)
	isIn := func(ps []planted) func(string) bool {
		return func(key string) bool {
			return slices.ContainsFunc(ps, func(p planted) bool { return strings.Contains(key, p.uuid) })
		}
	}
	// The leases: each planted attempt released and fenced
	// (release_stale_lease), with one "expired" lease event; the decoys'
	// attempts and every execution row of theirs untouched.
	changed(t, before, after, "ff_attempt", isIn(stale), func(key string, was, is map[string]any) {
		assert.Equal(t, "lease_expired_reclaimable", is["outcome"], key)
		assert.Nil(t, is["lease_expires_at_ms"], key)
		assert.Equal(t, was["lease_epoch"].(float64)+1, is["lease_epoch"], key)
		assert.Nil(t, is["worker_instance_id"], key)
	}, "outcome", "lease_expires_at_ms", "lease_epoch", "worker_instance_id")
	// The delays: eligible now, the delay cleared (promote_delayed).
	changed(t, before, after, "ff_exec_core", isIn(due), func(key string, _, is map[string]any) {
		assert.Equal(t, "eligible_now", is["eligibility_state"], key)
		assert.Nil(t, is["deadline_at_ms"], key)
	}, "eligibility_state", "deadline_at_ms")
	assert.Empty(t, before.rows["ff_lease_event"])
	var events []string
	for _, r := range after.rows["ff_lease_event"] {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.json), &ev))
		assert.Equal(t, "expired", ev["event_type"], r.json)
		assert.Nil(t, ev["lease_id"], r.json)
		events = append(events, fmt.Sprintf("%v %v %v %v", ev["partition_key"], ev["execution_id"], ev["namespace"], ev["instance_tag"]))
	}
	var wantEvents []string
	for i, p := range stale {
		ns, tag := "ns-shadow", "i-shadow"
		if i == len(stale)-1 {
			ns, tag = "<nil>", "<nil>" // its execution is gone: no tenant to copy
		}
		wantEvents = append(wantEvents, fmt.Sprintf("%d %s %s %s", p.pk, p.uuid, ns, tag))
	}
	assert.ElementsMatch(t, wantEvents, events, "one lease event per released lease")
	// Everything else exactly as planted; the lease events' sequence
	// moved by one per event.
	for table := range after.rows {
		if table == "ff_attempt" || table == "ff_exec_core" || table == "ff_lease_event" {
			continue
		}
		assert.Equal(t, before.rows[table], after.rows[table], "%s untouched", table)
	}
	for seq, v := range after.sequences {
		if !strings.HasPrefix(seq, "ff_lease_event_") {
			assert.Equal(t, before.sequences[seq], v, "sequence %s", seq)
		}
	}
}

// scannerView is what the test reads of a scanner's status.
type scannerView struct {
	mode            string
	cycle           uint64
	processed       int64
	wouldAct        uint64
	byCommand       map[string]uint64
	running, shadow bool
}

// heldInLastCycle returns scanner name's last complete cycle and the
// writes it held back in it: the shadow log's items recorded between the
// cycle's start and its end, both read from the host's clock (every call
// of a cycle is recorded after it starts and before it ends, which the
// next cycle's start follows).
func heldInLastCycle(h *Host, name string) (uint64, []shadow.Item) {
	u := h.units.Get(name)
	if u == nil {
		return 0, nil
	}
	rs := u.Runner().Status()
	l, ok := h.shadows.Lookup(name)
	if !ok {
		return rs.Cycle, nil
	}
	end := rs.LastCycleAt.Add(rs.LastDuration)
	var out []shadow.Item
	for _, it := range l.Snapshot(0).Latest {
		if !it.At.Before(rs.LastCycleAt) && !it.At.After(end) {
			out = append(out, it)
		}
	}
	return rs.Cycle, out
}

// pgState is every table of FlowFabric's schema (public), row by row,
// and every sequence's state.
type pgState struct {
	// rows are each table's rows by primary key.
	rows map[string]map[string]pgRow
	// sequences are each sequence's last_value/is_called.
	sequences map[string]string
}

// pgRow is one row: its system columns (the partition holding it, xmin,
// ctid: any write to it changes them, even one of the same values) and
// its columns as JSON.
type pgRow struct {
	sys, json string
}

// flowFabricState reads the FlowFabric schema's every table (through
// its partitioned parent) and sequence.
func flowFabricState(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}) pgState {
	t.Helper()
	ctx := context.Background()
	rows, err := q.Query(ctx, `SELECT c.relname::text, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S') AND NOT c.relispartition ORDER BY 1`)
	require.NoError(t, err)
	var tables, seqs []string
	for rows.Next() {
		var name, kind string
		require.NoError(t, rows.Scan(&name, &kind))
		if kind == "S" {
			seqs = append(seqs, name)
		} else {
			tables = append(tables, name)
		}
	}
	require.NoError(t, rows.Err())
	require.Contains(t, tables, "ff_exec_core")
	st := pgState{rows: map[string]map[string]pgRow{}, sequences: map[string]string{}}
	for _, table := range tables {
		var key string
		require.NoError(t, q.QueryRow(ctx, `SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY array_position(i.indkey::int2[], a.attnum))
			FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
			WHERE i.indrelid = $1::regclass AND i.indisprimary`, table).Scan(&key), table)
		rows, err := q.Query(ctx, fmt.Sprintf(`SELECT row(%s)::text, t.tableoid::regclass::text || ' ' || t.xmin::text || ' ' || t.ctid::text,
			row_to_json(t)::text FROM %s t`, key, pgx.Identifier{table}.Sanitize()))
		require.NoError(t, err, table)
		st.rows[table] = map[string]pgRow{}
		for rows.Next() {
			var k string
			var r pgRow
			require.NoError(t, rows.Scan(&k, &r.sys, &r.json))
			st.rows[table][k] = r
		}
		require.NoError(t, rows.Err(), table)
	}
	for _, seq := range seqs {
		var v string
		require.NoError(t, q.QueryRow(ctx, fmt.Sprintf("SELECT last_value::text || '/' || is_called::text FROM %s", pgx.Identifier{seq}.Sanitize())).Scan(&v))
		st.sequences[seq] = v
	}
	return st
}

// changed asserts that the rows of table whose key is planted changed in
// the named columns only (check says to what), and that every other row
// of it, and the set of rows, is as it was.
func changed(t *testing.T, before, after pgState, table string, planted func(key string) bool, check func(key string, was, is map[string]any), columns ...string) {
	t.Helper()
	assert.ElementsMatch(t, slices.Collect(maps.Keys(before.rows[table])), slices.Collect(maps.Keys(after.rows[table])), "%s: the same rows", table)
	n := 0
	for key, was := range before.rows[table] {
		is := after.rows[table][key]
		if !planted(key) {
			assert.Equal(t, was, is, "%s %s untouched", table, key)
			continue
		}
		n++
		var w, i map[string]any
		require.NoError(t, json.Unmarshal([]byte(was.json), &w))
		require.NoError(t, json.Unmarshal([]byte(is.json), &i))
		check(key, w, i)
		for _, c := range columns {
			delete(w, c)
			delete(i, c)
		}
		assert.Equal(t, w, i, "%s %s: only %v changed", table, key, columns)
	}
	assert.Positive(t, n, "%s: no planted row", table)
}
