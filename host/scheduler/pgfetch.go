package scheduler

// This file is the cycle's first step for a scanner with Postgres sources:
// the clock and the candidates come from the database (ffscan's candidate
// functions, one query per source for every partition of the cycle).

import (
	"context"
	"errors"
	"strings"

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

// now starts a sweep's read: it notes the store epoch, and reads the
// clock that the sweep's "now" is, and the host's time once it was read:
// a read that follows learns wake-ups in that epoch, at instants measured
// from then. For a Valkey scanner the clock is the server's TIME, read
// here. For a Postgres scanner it is the database's (ffscan's functions
// compare against it), and the candidate read brings it (fetchPostgres):
// read apart, it took a round trip and a transaction of its own per
// sweep.
func (sw *sweep) now(ctx context.Context) error {
	sw.epoch = sw.r.cfg.Epoch.Load()
	sw.clocked, sw.clockErr = false, nil
	switch {
	case sw.postgres() && sw.r.cfg.Postgres == nil:
		return errNoDatabase
	case sw.postgres():
		return nil
	}
	ms, err := sw.r.serverTime(ctx)
	sw.nowMs, sw.nowAt, sw.clocked = ms, sw.r.clk.Now(), err == nil
	return err
}

// read reads the partitions' candidates from the scanner's store.
// What the read reveals of each partition's next due entry is scheduled
// (wake.go).
func (sw *sweep) read(ctx context.Context, parts []keys.Partition) []*partState {
	var states []*partState
	if !sw.postgres() {
		states = sw.fetch(ctx, parts, sw.nowMs)
	} else {
		states = sw.fetchPostgres(ctx, parts)
	}
	sw.schedule(states)
	return states
}

// fetchPostgres runs each source's candidate function once for all the
// partitions, at most a batch of rows each. A failed query fails every
// partition of the cycle (they are counted failed and retried next cycle,
// and their wake-ups are dropped). A source with a due backlog counts it
// from the read: a partition that returned less than a batch has that many
// due, and only the partitions that came back full are counted again, in
// one more query.
//
// Each read brings the database's clock (postgres.ReadWithClock); the
// first that does is the sweep's "now". With wake-ups on, a time-scored
// source is read with its next-due companion in the same query: each
// partition's entry due next is when the partition is woken (wake.go),
// measured from that clock. A wake-up (dueOnly) reads the time-scored
// sources alone.
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
	count := r.cfg.Partitions.Count(sw.info.Family)
	share := r.cfg.PostgresReads.Share(r.ownedIndexes(sw.info.Family, count), count)
	for _, src := range sw.info.Sources {
		timed := timeScored(src)
		if sw.dueOnly && !timed {
			continue
		}
		got, err := postgres.ReadWithClock(ctx, r.cfg.PostgresReads.For(src.Key), src.Key, idx, share, count, sw.batch, sw.rank && timed, r.cfg.PostgresFilter)
		if err != nil {
			for _, st := range states {
				st.fetchError, st.sampled = true, false
			}
			if !sw.clocked && sw.clockErr == nil {
				sw.clockErr = err
			}
			if ctx.Err() != nil {
				// The host is stopping (or the sweep was cut short): the
				// read did not fail, and nothing is acted on without it.
				return states
			}
			r.noteErr(sw.sum, pgClass(err), "fetch", 1)
			r.log.Warn("postgres candidate read failed", "function", src.Key, "error", err)
			continue
		}
		if !sw.clocked {
			sw.nowMs, sw.nowAt, sw.clocked, sw.clockErr = got.NowMs, r.clk.Now(), true, nil
		}
		read := make(map[uint16]int, len(parts))
		for _, c := range got.Due {
			st := byIndex[c.Partition]
			if st == nil {
				// Not a partition asked for: a library bug, not work.
				r.noteErr(sw.sum, scannerapi.ErrInvalid, "foreign_partition", 1)
				continue
			}
			read[c.Partition]++
			score := float64(c.Score)
			st.cands = append(st.cands, scannerapi.Candidate{Source: src.Name, Key: src.Key, Member: c.Member, Score: score})
			if !st.hasDue || score < st.oldestDue {
				st.oldestDue, st.hasDue = score, true
			}
		}
		for p, n := range got.Next {
			if st := byIndex[p]; st != nil {
				st.noteWakeAt(n.AtMs)
			}
		}
		if src.Backlog == scannerapi.BacklogDue {
			sw.pgBacklog(ctx, src, states, byIndex, read)
		}
	}
	return states
}

// ownedIndexes are the partitions of a family of count that this host
// owns now: the share its reads are planned for (postgres.Readers.Share).
func (r *Runner) ownedIndexes(family keys.Family, count uint16) []uint16 {
	out := make([]uint16, 0, count)
	for i := range count {
		if r.cfg.Owns == nil || r.cfg.Owns(keys.Partition{Family: family, Index: i}) {
			out = append(out, i)
		}
	}
	return out
}

// pgBacklog adds a source's due backlog to each partition: what the read
// returned, or for a partition that returned a full batch a count of
// everything due there.
func (sw *sweep) pgBacklog(ctx context.Context, src scannerapi.CandidateSource, states []*partState, byIndex map[uint16]*partState, read map[uint16]int) {
	r := sw.r
	var full []uint16
	for _, st := range states {
		n := read[st.p.Index]
		if n >= sw.batch {
			full = append(full, st.p.Index)
			continue
		}
		st.backlog += int64(n)
	}
	if len(full) == 0 {
		return
	}
	counts, err := postgres.CountCandidates(ctx, r.cfg.PostgresReads.For(src.Key), src.Key, full, r.cfg.Partitions.Count(sw.info.Family), r.cfg.PostgresFilter)
	if err != nil {
		for _, p := range full {
			byIndex[p].sampled = false
		}
		r.noteErr(sw.sum, pgClass(err), "backlog", 1)
		r.log.Warn("postgres backlog count failed", "function", src.Key, "error", err)
		return
	}
	for _, p := range full {
		byIndex[p].backlog += counts[p]
	}
}

// pgClass classifies a database failure: the server's own errors are class
// server, anything else (no connection, a timeout) transport, and so are
// the errors a server sends as it drops a connection or refuses one
// (SQLSTATE class 08, and 57P01-57P03: shut down, crashed, starting up),
// which follow a restart or a failover: transport errors start a new store
// epoch, which drops every wake-up the host scheduled (wake.go).
func pgClass(err error) scannerapi.ErrorClass {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" {
			return scannerapi.ErrTransport
		}
		return scannerapi.ErrServer
	}
	return scannerapi.ErrTransport
}
