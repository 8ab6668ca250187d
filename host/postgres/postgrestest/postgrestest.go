// Package postgrestest helps tests build what FlowFabric leaves in a
// Postgres database.
package postgrestest

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ffscan/ffscan/host/postgres"
)

// LedgerDDL is the migration ledger as FlowFabric's migrator (sqlx)
// creates it.
const LedgerDDL = `CREATE TABLE _sqlx_migrations (
	version BIGINT PRIMARY KEY,
	description TEXT NOT NULL,
	installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
	success BOOLEAN NOT NULL,
	checksum BYTEA NOT NULL,
	execution_time BIGINT NOT NULL)`

// RecordLedger creates the ledger in the database at dsn and records the
// given migrations (version -> SHA-384 hex), those in failed as failed.
func RecordLedger(t testing.TB, dsn string, rows map[int64]string, failed ...int64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, LedgerDDL); err != nil {
		t.Fatal(err)
	}
	for _, v := range slices.Sorted(maps.Keys(rows)) {
		sum, err := hex.DecodeString(rows[v])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES ($1, $2, $3, $4, 1000)",
			v, fmt.Sprintf("migration %d", v), !slices.Contains(failed, v), sum); err != nil {
			t.Fatal(err)
		}
	}
}

// RecordFlowFabricLedger records the ledger of a database FlowFabric
// migrated to the migration this ffscan knows. Only the ledger: see
// MigrateLikeFlowFabric for the tables too.
func RecordFlowFabricLedger(t testing.TB, dsn string) {
	t.Helper()
	RecordLedger(t, dsn, postgres.FlowFabricChecksums())
}

// MigrateLikeFlowFabric leaves the database at dsn as FlowFabric's
// migrations leave it, as far as ffscan can tell: its tables (made by
// postgres.CreateSchema, whose own record is then dropped) and its ledger
// at the migration this ffscan knows.
func MigrateLikeFlowFabric(t testing.TB, dsn string) {
	t.Helper()
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := postgres.CreateSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA "+postgres.OriginSchema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	RecordFlowFabricLedger(t, dsn)
}
