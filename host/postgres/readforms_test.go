package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/postgres/postgrestest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
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

	now := plantEveryRead(t, pool, partitions)

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

// plantEveryRead plants, in partitions 0 to partitions-1 but every third,
// rows for every candidate function and next-due companion: due entries
// of either tenant, entries to come, entries that fail another condition,
// completion events and cancel groups. It returns the database clock the
// times were planted from.
func plantEveryRead(t *testing.T, pool *pgxpool.Pool, partitions int) int64 {
	t.Helper()
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
	return now
}

// TestShareReadsReadWhatTheFunctionsRead: a read given the host's share
// (Readers.Share) runs as one statement planned for the share's
// partitions, and returns the rows the candidate function returns for the
// partitions asked, next-due companion and filter included; a read of a
// partition outside the share, or of a few, runs the function itself. The
// statement's plan names only the children the share's partitions are in.
func TestShareReadsReadWhatTheFunctionsRead(t *testing.T) {
	t.Parallel()
	pool := postgrestest.SchemaDB(t, 2)
	ctx := context.Background()
	const partitions = 64
	plantEveryRead(t, pool, partitions)
	reads, err := postgres.OpenReaders(ctx, postgres.Options{DSN: pool.Config().ConnString()}, 0)
	require.NoError(t, err)
	t.Cleanup(reads.Close)

	// The host's share: the planted partitions and some empty ones, not
	// the whole family.
	var owned []uint16
	for p := range uint16(partitions) {
		owned = append(owned, p)
	}
	owned = append(owned, 200, 201, 202)
	share := reads.Share(owned, 256)
	require.Equal(t, owned, share)
	assert.Nil(t, reads.Share(owned, uint16(len(owned))), "a share of the whole family reads with the functions")
	assert.Nil(t, postgres.SharedReaders(pool).Share(owned, 256), "a pool that plans each read is given no share")

	// sorted orders rows by partition, keeping each partition's order.
	sorted := func(cs []postgres.Candidate) []string {
		slices.SortStableFunc(cs, func(a, b postgres.Candidate) int { return int(a.Partition) - int(b.Partition) })
		var out []string
		for _, c := range cs {
			out = append(out, fmt.Sprintf("%d %s %d", c.Partition, c.Member, c.Score))
		}
		return out
	}
	nexts := func(n map[uint16]postgres.NextDue) []string {
		var out []string
		for p, d := range n {
			out = append(out, fmt.Sprintf("%d %s %d", p, d.Member, d.AtMs))
		}
		sort.Strings(out)
		return out
	}
	// shareStatements are the share reads prepared on fn's connection.
	shareStatements := func(t *testing.T, fn string) []string {
		var names []string
		err := reads.For(fn).AcquireFunc(ctx, func(c *pgxpool.Conn) error {
			rows, err := c.Query(ctx, "SELECT name FROM pg_prepared_statements WHERE statement LIKE '%ffscan.'||$1||'_in(%' ORDER BY name", fn)
			if err != nil {
				return err
			}
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		require.NoError(t, err)
		return names
	}
	var asked, outside, few []uint16
	for p := range uint16(48) {
		asked = append(asked, p)
	}
	outside = append(slices.Clone(asked), 100)
	few = asked[:5]

	var fns []string
	for fn := range postgres.CandidateFunctions {
		fns = append(fns, fn)
	}
	sort.Strings(fns)
	for _, fn := range fns {
		_, next := postgres.NextDueFunctions[fn]
		bySharing := fn != "workers_expired" // its partitions are not the host's
		for _, f := range []scannerapi.Filter{{}, {Namespace: "a"}} {
			t.Run(fmt.Sprintf("%s %q", fn, f.Namespace), func(t *testing.T) {
				for _, parts := range [][]uint16{asked, share, outside, few} {
					want, err := postgres.ReadWithClock(ctx, reads.For(fn), fn, parts, nil, 256, 100, next, f)
					require.NoError(t, err)
					before := shareStatements(t, fn)
					got, err := postgres.ReadWithClock(ctx, reads.For(fn), fn, parts, share, 256, 100, next, f)
					require.NoError(t, err)
					assert.Equal(t, sorted(want.Due), sorted(got.Due), "%d partitions", len(parts))
					assert.Equal(t, nexts(want.Next), nexts(got.Next), "%d partitions", len(parts))
					plain, err := postgres.ReadCandidates(ctx, reads.For(fn), fn, parts, nil, 256, 100, f)
					require.NoError(t, err)
					shared, err := postgres.ReadCandidates(ctx, reads.For(fn), fn, parts, share, 256, 100, f)
					require.NoError(t, err)
					assert.Equal(t, sorted(plain), sorted(shared), "%d partitions", len(parts))
					if len(parts) == len(asked) && fn != "completions_undispatched" && fn != "completions_pending" && fn != "cancel_groups_pending" {
						assert.NotEmpty(t, want.Due, "the rows planted are read")
					}
					after := shareStatements(t, fn)
					switch {
					case !bySharing || len(parts) == len(outside) || len(parts) == len(few):
						assert.Equal(t, before, after, "%d partitions: the function's own read", len(parts))
					default:
						assert.NotEmpty(t, after, "%d partitions: a share read", len(parts))
					}
				}
			})
		}
	}

	// The plan of a share read names the children of the share's
	// partitions only.
	children := func(q string, args ...any) map[string]bool {
		rows, err := pool.Query(ctx, q, args...)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		out := map[string]bool{}
		for _, n := range names {
			for _, m := range attemptChild.FindAllString(n, -1) {
				out[m] = true
			}
		}
		return out
	}
	want := children(`SELECT c.relname::text FROM unnest($1::smallint[]) AS k
		JOIN pg_inherits i ON i.inhparent = 'ff_attempt'::regclass JOIN pg_class c ON c.oid = i.inhrelid
		WHERE satisfies_hash_partition('ff_attempt'::regclass, 256, substring(c.relname from '_p(\d+)$')::int, k)`, partitionKeysOf(share))
	require.Less(t, len(want), 256)
	var plan []string
	err = reads.For("lapsed_leases").AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		var name string
		if err := c.QueryRow(ctx, "SELECT name FROM pg_prepared_statements WHERE statement LIKE '%lapsed_leases_in(%' AND statement NOT LIKE '%lapsed_leases_next_in(%'").Scan(&name); err != nil {
			return err
		}
		rows, err := c.Query(ctx, fmt.Sprintf("EXPLAIN (COSTS OFF) EXECUTE %s('{1,2,3}', 10, NULL, NULL, NULL)", pgx.Identifier{name}.Sanitize()))
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	named := map[string]bool{}
	for _, line := range plan {
		for _, m := range attemptChild.FindAllString(line, -1) {
			named[m] = true
		}
	}
	assert.Equal(t, want, named, "the children the plan names")
}

var attemptChild = regexp.MustCompile(`ff_attempt_p\d+`)

func partitionKeysOf(parts []uint16) []int16 {
	out := make([]int16, len(parts))
	for i, p := range parts {
		out[i] = int16(p)
	}
	return out
}
