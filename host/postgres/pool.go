package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Options is how the host reaches the database.
type Options struct {
	// DSN is a libpq connection string or URL (TLS through sslmode,
	// sslrootcert, ...).
	DSN string
	// PoolSize bounds the pool's connections (0: pgx's default).
	PoolSize int
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
