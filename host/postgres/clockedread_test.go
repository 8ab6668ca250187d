package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func TestReadWithClock(t *testing.T) {
	t.Parallel()
	pool := sharedDB(t)
	ctx := context.Background()

	t.Run("the candidates, the next due and the clock after them", func(t *testing.T) {
		const pk = 91
		past, future := testUUID(pk, 1), testUUID(pk, 2)
		execRowAt(t, pool, pk, past, "active", "not_applicable", ms(-100), 0)
		execRowAt(t, pool, pk, future, "active", "not_applicable", ms(600_000), 0)
		before := one[int64](t, pool, "SELECT ffscan.now_ms()")
		got, err := postgres.ReadWithClock(ctx, pool, "deadlines_passed", []uint16{pk}, nil, 256, 100, true, scannerapi.Filter{})
		require.NoError(t, err)
		after := one[int64](t, pool, "SELECT ffscan.now_ms()")
		require.Len(t, got.Due, 1)
		assert.Equal(t, past, got.Due[0].Member)
		assert.Equal(t, uint16(pk), got.Due[0].Partition)
		require.Contains(t, got.Next, uint16(pk))
		assert.Equal(t, future, got.Next[pk].Member)
		assert.Equal(t, one[int64](t, pool, "SELECT deadline_at_ms + 1 FROM ff_exec_core WHERE execution_id = $1", future), got.Next[pk].AtMs)
		assert.GreaterOrEqual(t, got.NowMs, before, "the clock is read with the candidates")
		assert.LessOrEqual(t, got.NowMs, after)
		assert.Less(t, got.Due[0].Score, got.NowMs, "what is due was due by the clock returned")

		// Without the next-due companion: the same due rows, no next.
		plain, err := postgres.ReadWithClock(ctx, pool, "deadlines_passed", []uint16{pk}, nil, 256, 100, false, scannerapi.Filter{})
		require.NoError(t, err)
		assert.Equal(t, got.Due, plain.Due)
		assert.Nil(t, plain.Next)
		assert.GreaterOrEqual(t, plain.NowMs, after)
	})

	t.Run("the next due is as of the transaction's start, before the due read", func(t *testing.T) {
		// An entry that falls due after the transaction began and before
		// the due read compares is in both parts: were the next-due read
		// as of its own clock, it would be in neither when it fell due
		// between the two reads, and no wake-up would come for it.
		const pk = 92
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var started int64
		require.NoError(t, tx.QueryRow(ctx, "SELECT (extract(epoch FROM transaction_timestamp()) * 1000)::bigint").Scan(&started))
		eid := testUUID(pk, 1)
		exec(t, pool, `INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
			public_state, attempt_state, created_at_ms, deadline_at_ms, attempt_index, raw_fields)
			VALUES ($1, $2, 'default', 'active', 'leased', 'not_applicable', 'running', 'running_attempt', 1, $3, 0, '{}')`, pk, eid, started)
		// Until the database's clock has passed the deadline: the due read
		// then returns the entry.
		for one[int64](t, pool, "SELECT ffscan.now_ms()") <= started {
		}
		got, err := postgres.ReadWithClock(ctx, tx, "deadlines_passed", []uint16{pk}, nil, 256, 100, true, scannerapi.Filter{})
		require.NoError(t, err)
		require.Len(t, got.Due, 1)
		assert.Equal(t, eid, got.Due[0].Member)
		require.Contains(t, got.Next, uint16(pk), "as of the transaction's start the entry was not due yet")
		assert.Equal(t, eid, got.Next[pk].Member)
		assert.Equal(t, started+1, got.Next[pk].AtMs)
		assert.Greater(t, got.NowMs, started)
	})

	t.Run("only the library's candidate functions", func(t *testing.T) {
		for _, c := range []struct {
			fn   string
			next bool
		}{{"no_such_candidates", false}, {"no_such_candidates", true}, {"completions_pending", true}, {"now_ms", false}} {
			_, err := postgres.ReadWithClock(ctx, pool, c.fn, []uint16{1}, nil, 256, 10, c.next, scannerapi.Filter{})
			assert.Error(t, err, "%s (next: %v)", c.fn, c.next)
		}
	})
}
