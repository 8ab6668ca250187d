package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Readers are the connections a host runs its candidate reads on
// (ReadWithClock, ReadCandidates, ReadCandidatesNext, CountCandidates):
// each candidate function, with its next-due companion, always on the
// same one.
//
// The candidate functions read with generic plans (force_generic_plan:
// one plan over every child of the tables, pruned at run time), which
// PL/pgSQL keeps per connection. An ANALYZE of a table they read
// (autovacuum's, after a burst of writes) drops those plans on every
// connection at once, and each connection plans a function again at its
// next run of it: 100-300 ms over 256 children, more on a busy server.
// On the serving pool a function's reads land on whichever connection is
// free, so one analyze cost a plan per function for every connection that
// had run it (2-4 per function with one host in the Postgres hosts
// benchmark, 6-12 with three, all in the few seconds of a drain). Pinned
// to one connection, a function is planned again once per host.
//
// A Readers is safe for concurrent use; reads of functions pinned to one
// connection wait for each other.
type Readers struct {
	// conns are the connections opened for the reads (one each: a pool of
	// one, which re-dials, and warms up again, a connection that broke).
	conns []*pgxpool.Pool
	byFn  map[string]*pgxpool.Pool
	// shared is the pool every read runs on (SharedReaders), nil when
	// the Readers have their own connections.
	shared *pgxpool.Pool
	// generic says the connections keep a generic plan of every statement
	// they prepare (plan_cache_mode force_generic_plan), which share reads
	// need (Share).
	generic bool
}

// readerPingIdle is how long a read connection stays idle before the pool
// pings it ahead of a read (pgx's default: a second). A ping is a round
// trip ahead of the read, and a transaction of its own in the server's
// statistics; the scanners read every few seconds, and a read that finds
// its connection broken fails as a transport error, which the scheduler
// answers as it should (a new store epoch: the wake-ups learned on that
// connection are dropped), and the next read opens and warms up another.
const readerPingIdle = 30 * time.Second

// MaxReaderConnections is how many connections OpenReaders opens at most,
// and by default: one for each candidate function, so that no read waits
// for another function's.
var MaxReaderConnections = len(CandidateFunctions)

// OpenReaders opens n connections (0: MaxReaderConnections) to o.DSN for the
// candidate reads, o's other settings as for Connect (PoolSize aside), and
// pins each candidate function to one of them (in the order of their
// names, in turn). Each connection is open, and has run its functions
// once in both of their forms (the planning paid here, not by a read),
// when OpenReaders returns; one that breaks is opened and warmed up again
// before its next read. The connections' application_name is
// "ffscan reads" (unless o.DSN names one), so that pg_stat_activity tells
// them from the pool's.
func OpenReaders(ctx context.Context, o Options, n int) (*Readers, error) {
	fns := slices.Sorted(maps.Keys(CandidateFunctions))
	if n == 0 {
		n = MaxReaderConnections
	}
	if n < 1 || n > MaxReaderConnections {
		return nil, fmt.Errorf("postgres: %d read connections: between 1 and %d (one per candidate function)", n, MaxReaderConnections)
	}
	pinned := make([][]string, n)
	for i, fn := range fns {
		pinned[i%n] = append(pinned[i%n], fn)
	}
	cfgs := make([]*pgxpool.Config, n)
	// Share reads need the connection to keep its statements' generic
	// plans: not behind a transaction pooler (no statement is kept), nor
	// where the DSN sets plan_cache_mode.
	generic := !o.Transaction && !dsnNames(o.DSN)["plan_cache_mode"]
	for i := range n {
		o := o
		o.PoolSize, o.Ready = 1, true
		cfg, err := poolConfig(o)
		if err != nil {
			return nil, err
		}
		if !dsnNames(o.DSN)["application_name"] {
			cfg.ConnConfig.RuntimeParams["application_name"] = "ffscan reads"
		}
		if generic {
			// The candidate functions set their own plan_cache_mode; what
			// the session's setting decides is the plan of the statements
			// a read prepares: a share read is planned once for its share
			// (Share), not at every read as force_custom_plan would.
			cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
		}
		// Each read connection keeps the few statements of its functions
		// and their share reads; those of an older share are the least
		// used, so the cache drops them first (a share read's plan holds
		// several megabytes of the server's memory: 8 MB for 85
		// partitions with the next-due companion).
		cfg.ConnConfig.StatementCacheCapacity = readStatementsPerFunction * len(pinned[i])
		statements := readWarmUpStatements(pinned[i])
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			return warmUp(ctx, conn, statements)
		}
		cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
			return p.IdleDuration > readerPingIdle
		}
		cfgs[i] = cfg
	}
	r := &Readers{conns: make([]*pgxpool.Pool, n), byFn: map[string]*pgxpool.Pool{}, generic: generic}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.conns[i], errs[i] = open(ctx, cfg, true)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("postgres: read connection %d of %d: %w", i+1, n, err)
		}
		for _, fn := range pinned[i] {
			r.byFn[fn] = r.conns[i]
		}
	}
	return r, nil
}

// SharedReaders runs every candidate read on pool: for a host that does
// not warm up connections (read only: it installs nothing, so it cannot
// count on the library's functions being there to warm up), and for
// tests of the reads themselves.
func SharedReaders(pool *pgxpool.Pool) *Readers { return &Readers{shared: pool} }

// For is the connection candidate function fn reads on. A name that is
// not a candidate function gets the first one, where the read refuses it
// (ReadCandidates checks fn before it sends anything).
func (r *Readers) For(fn string) *pgxpool.Pool {
	if r.shared != nil {
		return r.shared
	}
	if db, ok := r.byFn[fn]; ok {
		return db
	}
	return r.conns[0]
}

// Share is the share argument of ReadWithClock and ReadCandidates for a
// host that owns owned, its partitions of a family of count: owned,
// unless the connections cannot keep a share read's plan or owned is the
// whole family (nil: every read runs the candidate function itself).
func (r *Readers) Share(owned []uint16, count uint16) []uint16 {
	if !r.generic || len(owned) >= int(count) {
		return nil
	}
	return owned
}

// readStatementsPerFunction is how many statements a read connection
// keeps prepared for each function pinned to it: its reads with and
// without the next-due companion, their clock reads, its backlog count,
// its share reads, and one share's more while the shares change. An
// evicted statement of the function's own costs a prepare to read again
// (PL/pgSQL keeps the function's plans apart from it); an evicted share
// read, a plan of its share.
const readStatementsPerFunction = 8

// Connections is how many connections the Readers opened (0 when they
// share a pool).
func (r *Readers) Connections() int { return len(r.conns) }

// Close closes the connections the Readers opened (not a shared pool).
func (r *Readers) Close() {
	for _, c := range r.conns {
		if c != nil {
			c.Close()
		}
	}
}
