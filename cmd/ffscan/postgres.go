package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/postgres"
)

// cmdPostgresCreateSchema creates FlowFabric's tables in an empty database
// (postgres.dsn), for tests, the demo and users without FlowFabric, and
// records that ffscan made them.
func cmdPostgresCreateSchema(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("postgres create-schema", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	if cfg.Postgres.DSN == "" {
		return usageError{errors.New("no database: set postgres.dsn or pass --postgres-dsn")}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: cfg.Postgres.DSN, PoolSize: 2, Transaction: cfg.Postgres.Pooling == config.PoolingTransaction})
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := postgres.CreateSchema(ctx, pool)
	if err != nil {
		return err
	}
	if !res.Created {
		fmt.Fprintf(stdout, "the schema is already complete (%d tables, %d partitions, created by ffscan)\n", res.Tables, res.Children)
		return nil
	}
	fmt.Fprintf(stdout, "created FlowFabric's schema, equivalent to its migration %d: %d tables, %d partitions, in %s (recorded in %s.schema_origin; FlowFabric's migration ledger is not written)\n",
		postgres.KnownMigration, res.Tables, res.Children, res.Took.Round(time.Millisecond), postgres.OriginSchema)
	return nil
}
