package postgres

import (
	"context"
	"fmt"

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
}

// Connect opens the host's pool and checks that the database answers.
func Connect(ctx context.Context, o Options) (*pgxpool.Pool, error) {
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return pool, nil
}
