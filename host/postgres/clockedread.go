package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// ClockedRead is a candidate read that brought the database's clock with
// it (ReadWithClock).
type ClockedRead struct {
	Due []Candidate
	// Next is each partition's entry due next (ReadCandidatesNext), nil
	// for a read without its next-due companion.
	Next map[uint16]NextDue
	// NowMs is the database's clock (now_ms) read after the candidates,
	// Unix ms: every due row was due by then.
	NowMs int64
}

// batcher is what ReadWithClock sends its statements through: a pool, or
// one connection.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// txStartMs is the database's clock at the start of the transaction, Unix
// ms rounded as now_ms rounds it. In ReadWithClock's transaction that
// start comes before the due read compares against now_ms, so as the
// next-due companion's as_of_ms it keeps the contract of
// ReadCandidatesNext: an entry the due read left out as not yet due was
// not due at as_of_ms either.
const txStartMs = "(extract(epoch FROM transaction_timestamp()) * 1000)::bigint"

// ReadWithClock runs candidate function fn as ReadCandidates does (with
// next, with its next-due companion as ReadCandidatesNext does, as of the
// transaction's start), then reads the clock: one round trip and one
// transaction, where a clock read before the candidates took a round trip
// and a transaction of its own (more than a third of an idle host's
// transactions were those clock reads). The clock read last is the one a
// caller measures wake-ups from: it is taken when the reply is about to
// leave, as a clock read alone would be.
//
// share, when not nil, is every partition the host reads of the family
// (Readers.Share): a read of more than a few of them runs as a share read
// (shareQuery), with the same rows.
func ReadWithClock(ctx context.Context, db batcher, fn string, parts, share []uint16, count uint16, perPartition int, next bool, f scannerapi.Filter) (ClockedRead, error) {
	var (
		sql  string
		args []any
		err  error
	)
	if next {
		sql, args, err = dueAndNextQuery(fn, parts, count, perPartition, txStartMs, f)
	} else {
		sql, args, err = dueQuery(fn, parts, count, perPartition, f)
	}
	if err != nil {
		return ClockedRead{}, err
	}
	if s, a, ok := shareQuery(fn, parts, share, count, perPartition, next, txStartMs, filterArgs(f)); ok {
		sql, args = s, a
	}
	var (
		b   pgx.Batch
		out ClockedRead
	)
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		var err error
		out.Due, out.Next, err = scanCandidates(rows, next)
		return err
	})
	// The comment names the read the clock follows, in pg_stat_activity
	// and the statement log (fn is a name of the library's, checked
	// above).
	b.Queue("SELECT ffscan.now_ms() /* after " + fn + " */").QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.NowMs)
	})
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return ClockedRead{}, fmt.Errorf("postgres: %s with the clock: %w", fn, err)
	}
	return out, nil
}
