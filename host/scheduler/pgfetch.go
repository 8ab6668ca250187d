package scheduler

// This file is the cycle's first step for a scanner with Postgres sources:
// the clock and the candidates come from the database (ffscan's candidate
// functions, one query per source for every partition of the cycle).

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// errNoDatabase fails the cycles of a Postgres scanner on a host without
// postgres.dsn.
var errNoDatabase = errors.New("the scanner reads a Postgres database and the host has none (set postgres.dsn)")

// errNoValkey fails the cycles of a Valkey scanner on a host that serves
// a Postgres database alone.
var errNoValkey = errors.New("the scanner reads Valkey and the host has none (set valkey.addrs)")

func (sw *sweep) postgres() bool { return sw.info.UsesPostgres() }

// now is the cycle's "now": the database's clock for a Postgres scanner
// (ffscan's functions compare against it), the server's TIME otherwise.
func (sw *sweep) now(ctx context.Context) (int64, error) {
	if !sw.postgres() {
		return sw.r.serverTime(ctx)
	}
	if sw.r.cfg.Postgres == nil {
		return 0, errNoDatabase
	}
	return postgres.Now(ctx, sw.r.cfg.Postgres)
}

// read reads the partitions' candidates from the scanner's store.
func (sw *sweep) read(ctx context.Context, parts []keys.Partition, nowMs int64) []*partState {
	if !sw.postgres() {
		return sw.fetch(ctx, parts, nowMs)
	}
	return sw.fetchPostgres(ctx, parts)
}

// fetchPostgres runs each source's candidate function once for all the
// partitions, at most a batch of rows each. A failed query fails every
// partition of the cycle (they are counted failed and retried next cycle).
func (sw *sweep) fetchPostgres(ctx context.Context, parts []keys.Partition) []*partState {
	r := sw.r
	states := make([]*partState, len(parts))
	byIndex := make(map[uint16]*partState, len(parts))
	idx := make([]uint16, len(parts))
	for i, p := range parts {
		st := &partState{p: p, next: map[string]uint64{}, sampled: true}
		states[i], byIndex[p.Index], idx[i] = st, st, p.Index
	}
	if len(parts) == 0 {
		return states
	}
	for _, src := range sw.info.Sources {
		rows, err := postgres.ReadCandidates(ctx, r.cfg.Postgres, src.Key, idx, r.cfg.Partitions.Count(sw.info.Family), sw.batch, r.cfg.PostgresFilter)
		if err != nil {
			for _, st := range states {
				st.fetchError, st.sampled = true, false
			}
			r.noteErr(sw.sum, pgClass(err), "fetch", 1)
			r.log.Warn("postgres candidate read failed", "function", src.Key, "error", err)
			continue
		}
		for _, c := range rows {
			st := byIndex[c.Partition]
			if st == nil {
				// Not a partition asked for: a library bug, not work.
				r.noteErr(sw.sum, scannerapi.ErrInvalid, "foreign_partition", 1)
				continue
			}
			score := float64(c.Score)
			st.cands = append(st.cands, scannerapi.Candidate{Source: src.Name, Key: src.Key, Member: c.Member, Score: score})
			if !st.hasDue || score < st.oldestDue {
				st.oldestDue, st.hasDue = score, true
			}
		}
	}
	return states
}

// pgClass classifies a database failure: the server's own errors are class
// server, anything else (no connection, a timeout) transport.
func pgClass(err error) scannerapi.ErrorClass {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return scannerapi.ErrServer
	}
	return scannerapi.ErrTransport
}
