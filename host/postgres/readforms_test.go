package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
)

// TestCandidateFunctionsReadFewAndManyAlike: a candidate function (and a
// next-due companion) reads a handful of partitions one query each and
// more in one query over all of them (ffscan.few_partitions()); both
// forms return the same rows, filter or not, for partitions with due
// entries, entries to come, entries that fail another condition, other
// tenants' entries, and nothing at all.
func TestCandidateFunctionsReadFewAndManyAlike(t *testing.T) {
	t.Parallel()
	// A database of its own: the rows compared must not change between
	// the two reads.
	pool := postgrestest.SchemaDB(t, 4)
	ctx := context.Background()
	few := one[int](t, pool, "SELECT ffscan.few_partitions()")
	const partitions = 64
	require.Greater(t, partitions, few, "the many-partition read must take the other form")

	now := one[int64](t, pool, "SELECT ffscan.now_ms()")
	past, future := now-5_000, now+3_600_000
	for fi, c := range nextDueCases() {
		for pk := range partitions {
			if pk%3 == 0 {
				continue // nothing in this partition
			}
			n := 10 * (fi + 1)
			c.plant(t, pool, pk, n+1, rawA, past)
			c.plant(t, pool, pk, n+2, rawB, past-1)
			c.plant(t, pool, pk, n+3, rawA, future)
			if c.odd != nil {
				c.odd(t, pool, pk, n+4, past)
			}
		}
	}
	// Completion events and cancel groups, on executions of either tenant
	// (the first two lapsed_leases planted above).
	for pk := range partitions {
		if pk%3 == 0 {
			continue
		}
		for i, eid := range []string{testUUID(pk, 11), testUUID(pk, 12)} {
			exec(t, pool, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms, committed_at_ms)
				VALUES ($1, $2, 'success', 1, $3)`, pk, eid, now-60_000+int64(i))
			exec(t, pool, "INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms) VALUES ($1, $2, $3, $4)",
				pk, testUUID(pk, 900+i), eid, 10+i)
		}
	}

	all := make([]int16, partitions)
	for i := range all {
		all[i] = int16(i)
	}
	// read runs fn over parts in calls of at most chunk partitions.
	read := func(t *testing.T, fn string, next bool, chunk int, filter []any) []string {
		var out []string
		for c := range slices.Chunk(all, chunk) {
			args := []any{c, 100, 256}
			if next {
				args = []any{c, 256, now}
			}
			rows, err := pool.Query(ctx, "SELECT partition_key, member, "+map[bool]string{false: "score", true: "due_at_ms"}[next]+
				" FROM ffscan."+fn+"($1, $2, $3, $4, $5, $6)", append(args, filter...)...)
			require.NoError(t, err)
			for rows.Next() {
				var (
					pk     int16
					member string
					score  int64
				)
				require.NoError(t, rows.Scan(&pk, &member, &score))
				out = append(out, fmt.Sprintf("%d %s %d", pk, member, score))
			}
			require.NoError(t, rows.Err())
		}
		return out
	}
	var fns []string
	for fn := range postgres.CandidateFunctions {
		fns = append(fns, fn)
	}
	for _, next := range postgres.NextDueFunctions {
		fns = append(fns, next)
	}
	sort.Strings(fns)
	for _, fn := range fns {
		_, isCandidate := postgres.CandidateFunctions[fn]
		for _, filter := range [][]any{{nil, nil, nil}, {"a", nil, nil}} {
			t.Run(fmt.Sprintf("%s %v", fn, filter[0]), func(t *testing.T) {
				many := read(t, fn, !isCandidate, partitions, filter)
				byFew := read(t, fn, !isCandidate, few, filter)
				byOne := read(t, fn, !isCandidate, 1, filter)
				assert.NotEmpty(t, many, "the rows planted are read")
				assert.Equal(t, many, byFew, "the same rows, in the order of the partitions asked")
				assert.Equal(t, many, byOne)
			})
		}
	}
}
