package postgres

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options is how the host reaches the database.
type Options struct {
	// DSN is a libpq connection string or URL (TLS through sslmode,
	// sslrootcert, ...).
	DSN string
	// PoolSize bounds the pool's connections (0: pgx's default).
	PoolSize int
	// Transaction says DSN reaches a pooler in transaction mode (PgBouncer's
	// pool_mode = transaction), which may run each transaction on another
	// server connection: unless DSN names a default_query_exec_mode, the
	// pool then uses pgx's exec mode (an unnamed statement parsed, bound
	// and run in one round trip) instead of caching prepared statements
	// per connection, which the next transaction's server connection would
	// not know.
	Transaction bool
	// Ready makes the pool the host's serving pool, for a database where
	// ffscan's library is installed: each connection runs every function
	// of the library the pool serves once (WarmUp: all but the candidate
	// reads, which run on Readers) before the pool hands it out, the pool
	// keeps all PoolSize connections open (MinConns; unless DSN names
	// pool_min_conns), a connection is not closed for its age (unless DSN
	// names pool_max_conn_lifetime), and Connect returns once every
	// connection is open and ready. A library function's first run on a
	// connection plans its statements, over every child of the tables
	// (hundreds of milliseconds for a candidate read): paid here, at
	// boot, not by a wake-up or a dispatch.
	//
	// The sessions also plan the statements of the functions that have
	// no plan_cache_mode of their own (the actions) for each call's
	// arguments (plan_cache_mode force_custom_plan, unless DSN names
	// plan_cache_mode or Transaction is set): a custom plan of a
	// statement on one partition key reads one child and costs a fraction
	// of a millisecond, while PostgreSQL's default makes five custom plans
	// and then, at a statement's sixth run on the connection, a generic
	// plan over every child (hundreds of milliseconds for each statement
	// of expire_lapsed_lease), only to keep using custom plans, which cost
	// less. No warm-up call with arguments that find no row reaches the
	// statements that write, so that sixth run fell on whichever
	// connection got there first, at any time after boot.
	Ready bool
}

// Connect opens the host's pool and checks that the database answers.
func Connect(ctx context.Context, o Options) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(o)
	if err != nil {
		return nil, err
	}
	if o.Ready {
		cfg.AfterConnect = WarmUp
	}
	return open(ctx, cfg, o.Ready)
}

// poolConfig is the pool configuration Options ask for, AfterConnect
// left to the caller.
func poolConfig(o Options) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		// pgx's message can quote the DSN, password included: say only
		// what is wrong with it.
		return nil, fmt.Errorf("postgres: postgres.dsn is not a valid connection string")
	}
	if o.PoolSize > 0 {
		cfg.MaxConns = int32(o.PoolSize)
	}
	if o.Transaction {
		if raw, err := pgconn.ParseConfig(o.DSN); err == nil && raw.RuntimeParams["default_query_exec_mode"] == "" {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
	}
	if o.Ready {
		named := dsnNames(o.DSN)
		if !named["pool_min_conns"] {
			cfg.MinConns = cfg.MaxConns
		}
		if !o.Transaction && !named["plan_cache_mode"] {
			// A transaction pooler refuses startup parameters it does
			// not know (PgBouncer's ignore_startup_parameters), and would
			// not keep a session's setting anyway: there the role's or
			// database's setting applies (docs/postgres-design.md).
			cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
		}
		if !named["pool_max_conn_lifetime"] {
			cfg.MaxConnLifetime = 0 // never: a new connection plans again
		}
	}
	return cfg, nil
}

// open opens a pool of cfg, checks that the database answers and, when
// ready, that every connection of MinConns is open (and has run
// AfterConnect).
func open(ctx context.Context, cfg *pgxpool.Config, ready bool) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	if ready {
		if err := fill(ctx, pool); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: ready the pool's connections: %w", err)
		}
	}
	return pool, nil
}

// dsnNames are the settings a DSN names (URL query or keyword/value).
func dsnNames(dsn string) map[string]bool {
	out := map[string]bool{}
	if _, q, ok := strings.Cut(dsn, "?"); ok && strings.Contains(dsn, "://") {
		for _, kv := range strings.Split(q, "&") {
			k, _, _ := strings.Cut(kv, "=")
			out[k] = true
		}
		return out
	}
	for _, f := range strings.Fields(dsn) {
		if k, _, ok := strings.Cut(f, "="); ok {
			out[k] = true
		}
	}
	return out
}

// fill holds MinConns connections at once, so that each is open and has
// run WarmUp, then gives them back.
func fill(ctx context.Context, pool *pgxpool.Pool) error {
	n := int(pool.Config().MinConns)
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = pool.Acquire(ctx)
		}()
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// warmNil is an id no row has.
const warmNil = "'00000000-0000-0000-0000-000000000000'::uuid"

// warmArgs are the arguments each action function is warmed up with: a
// row that does not exist, so it answers a not-found no-op.
var warmArgs = map[string]string{
	"expire_lapsed_lease":       "0::smallint, " + warmNil + ", 0",
	"release_stale_lease":       "0::smallint, " + warmNil + ", 0",
	"expire_execution_deadline": "0::smallint, " + warmNil,
	"promote_delayed":           "0::smallint, " + warmNil,
	"expire_pending_waitpoint":  "0::smallint, " + warmNil,
	"expire_suspension":         "0::smallint, " + warmNil + ", " + warmNil,
	"reset_budget":              "0::smallint, ''",
	"dispatch_completion":       "0::smallint, 0::bigint",
	"dispatch_sibling_cancels":  "0::smallint, " + warmNil + ", " + warmNil,
	"reconcile_sibling_cancels": "0::smallint, " + warmNil + ", " + warmNil,
	"sweep_worker":              `0::smallint, '0/["", ""]'`,
}

// warmFilter is the filter arguments the host passes to every function
// that takes them (filterArgs): a call that leaves them to their defaults
// has no input collation, one that passes text has the default
// collation, and PL/pgSQL compiles (and plans) a function once per input
// collation it is called with. Warmed up without them, each function was
// compiled and planned again at the host's first call on the connection.
const warmFilter = "NULL::text, NULL::text, NULL::text"

// warmParts are the partitions the reads are warmed up with: one, and
// more than ffscan.few_partitions() (the same one again).
var warmParts = []string{"'{0}'::smallint[]", "array_fill(0::smallint, ARRAY[ffscan.few_partitions() + 1])"}

// warmGroup is the share group the share's functions are warmed up in:
// one no host uses.
const warmGroup = "'ffscan warm-up'"

// WarmUpStatements are what WarmUp runs: every function of ffscan's
// library the host calls on its pool, once each, the actions on a row
// that does not exist, the share's functions in a group of their own. The
// candidate reads are not among them: they run on Readers, which warm
// them up (readWarmUpStatements).
func WarmUpStatements() []string {
	out := []string{"SELECT ffscan.now_ms()"}
	for _, fn := range slices.Sorted(maps.Keys(ActionFunctions)) {
		out = append(out, fmt.Sprintf("SELECT ffscan.%s(%s, %s)", fn, warmArgs[fn], warmFilter))
	}
	return append(out,
		"SELECT count(*) FROM ffscan.dispatch_completions(0::smallint, '{0}'::bigint[], "+warmFilter+")",
		"SELECT count(*) FROM ffscan.expire_lapsed_leases(0::smallint, ARRAY["+warmNil+"], '{0}'::integer[], "+warmFilter+")",
		"SELECT count(*) FROM ffscan.share_renew("+warmGroup+", '', '', 1)",
		"SELECT count(*) FROM ffscan.share_hold("+warmGroup+", '', 1, '{}'::text[], '{}'::smallint[])",
		"SELECT ffscan.share_release("+warmGroup+", '', '{}'::text[], '{}'::smallint[])",
		"SELECT ffscan.share_leave("+warmGroup+", '')",
	)
}

// readWarmUpStatements warm up candidate functions fns, with their
// next-due companions, and the clock. Each read runs in both of its forms
// (a few partitions, one query each; more, one query over all:
// library.sql), which PL/pgSQL plans apart, at its first run of each.
// They read nothing: no row for a due read (LIMIT 0), none due after the
// last millisecond for a next-due one.
func readWarmUpStatements(fns []string) []string {
	out := []string{"SELECT ffscan.now_ms()"}
	for _, fn := range fns {
		for _, parts := range warmParts {
			out = append(out, fmt.Sprintf("SELECT count(*) FROM ffscan.%s(%s, 0, 256, %s)", fn, parts, warmFilter))
		}
		if next, ok := NextDueFunctions[fn]; ok {
			for _, parts := range warmParts {
				out = append(out, fmt.Sprintf("SELECT count(*) FROM ffscan.%s(%s, 256, %d, %s)", next, parts, int64(math.MaxInt64), warmFilter))
			}
		}
	}
	return out
}

// WarmUp runs WarmUpStatements on conn, in one transaction it rolls back
// (nothing is written, nothing notified): PL/pgSQL keeps the plans it made
// for the connection's later calls. Behind a transaction pooler it warms
// the server connection the pooler gave it.
func WarmUp(ctx context.Context, conn *pgx.Conn) error {
	return warmUp(ctx, conn, WarmUpStatements())
}

// warmUp runs statements on conn in one transaction it rolls back.
func warmUp(ctx context.Context, conn *pgx.Conn, statements []string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	b := &pgx.Batch{}
	for _, s := range statements {
		b.Queue(s)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("warm up ffscan's library: %w", err)
	}
	return tx.Rollback(ctx)
}
