package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/host/clock"
)

// Origin is the schema ffscan records when it creates FlowFabric's tables
// itself (for tests, the demo and users without FlowFabric), so that the
// database is recognisable as ffscan's and never mistaken for one
// FlowFabric migrated: ffscan writes nothing in _sqlx_migrations (a row
// FlowFabric does not know makes its binaries refuse to start) and no
// ff_migration_annotation rows (those stand for FlowFabric's files).
const (
	OriginSchema = "ffscan"
	originTable  = OriginSchema + ".schema_origin"
	// originCreator is what schema_origin.created_by says.
	originCreator = "ffscan"
)

// createLock is the advisory lock key CreateSchema holds, so two hosts
// creating the schema at once take turns (the second finds it done).
const createLock int64 = 0x6666_7363_616e_0001 // "ffscan" + 1

// CreateResult says what CreateSchema did.
type CreateResult struct {
	// Created is false when the schema was already complete.
	Created bool
	// Tables and Children count what exists afterwards.
	Tables, Children int
	Took             time.Duration
}

// CreateSchema creates FlowFabric's 34 tables (26 of them hash-partitioned
// 256 ways), their indexes and NOTIFY triggers, equivalent to FlowFabric's
// migration 22, and records the creation in ffscan.schema_origin.
//
// It refuses a database FlowFabric migrated (a _sqlx_migrations table) and
// one holding FlowFabric tables it did not create. Creation is not one
// transaction (6656 partitions need more locks than a stock server gives
// one transaction), so a run that stops half way leaves the origin row
// unfinished: Recognize refuses such a database, and running CreateSchema
// again completes it (every step is idempotent).
func CreateSchema(ctx context.Context, pool *pgxpool.Pool) (CreateResult, error) {
	// An operator's one-shot command: the time it took is reported, not
	// acted on.
	clk := clock.Real()
	t0 := clk.Now()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return CreateResult{}, fmt.Errorf("postgres: %w", err)
	}
	defer conn.Release()
	// A session-level advisory lock: held across the many transactions
	// below, and released when the connection goes back.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", createLock); err != nil {
		return CreateResult{}, fmt.Errorf("postgres: take the schema creation lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", createLock)
	}()

	state, err := readOrigin(ctx, conn)
	if err != nil {
		return CreateResult{}, err
	}
	if state == originComplete {
		tables, children, err := countTables(ctx, conn)
		return CreateResult{Tables: tables, Children: children, Took: clock.Since(clk, t0)}, err
	}
	if state == originNone {
		if err := refuseForeign(ctx, conn); err != nil {
			return CreateResult{}, err
		}
	}
	exec := func(what, sql string) error {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("postgres: create %s: %w", what, err)
		}
		return nil
	}
	if err := exec("ffscan's schema", "CREATE SCHEMA IF NOT EXISTS "+OriginSchema+`;
CREATE TABLE IF NOT EXISTS `+originTable+` (
	created_by text NOT NULL,
	flowfabric_equivalent integer NOT NULL,
	started_at timestamptz NOT NULL DEFAULT now(),
	completed_at timestamptz)`); err != nil {
		return CreateResult{}, err
	}
	if state == originNone {
		// Recorded first, unfinished: from here on the tables are ours.
		if _, err := conn.Exec(ctx, "INSERT INTO "+originTable+" (created_by, flowfabric_equivalent) VALUES ($1, $2)",
			originCreator, KnownMigration); err != nil {
			return CreateResult{}, fmt.Errorf("postgres: record the schema's origin: %w", err)
		}
	}
	for _, t := range schemaTables {
		if err := exec(t.name, t.createSQL()); err != nil {
			return CreateResult{}, err
		}
		// One transaction per parent's children: a few locks per child,
		// well within a stock server's lock table.
		if t.children > 0 {
			if err := exec(t.name+"'s partitions", "BEGIN;\n"+t.childrenSQL()+"COMMIT;"); err != nil {
				return CreateResult{}, err
			}
		}
		for _, ix := range t.indexes {
			if err := exec(ix.name, "CREATE INDEX IF NOT EXISTS "+ix.name+" ON "+t.name+" "+ix.def); err != nil {
				return CreateResult{}, err
			}
		}
	}
	for _, n := range schemaNotifiers {
		if err := exec(n.trigger, n.createSQL()); err != nil {
			return CreateResult{}, err
		}
	}
	// The partition counts FlowFabric's first migration seeds; nothing
	// reads them at run time (§1.4), but a FlowFabric tool may look.
	if err := exec("ff_partition_config's row", "INSERT INTO ff_partition_config VALUES (true, 256, 256, 256, '0.7.0') ON CONFLICT DO NOTHING"); err != nil {
		return CreateResult{}, err
	}
	tables, children, err := countTables(ctx, conn)
	if err != nil {
		return CreateResult{}, err
	}
	if want := len(schemaTables); tables != want || children != schemaChildren() {
		return CreateResult{}, fmt.Errorf("postgres: after creation the database holds %d FlowFabric tables and %d partitions, not %d and %d", tables, children, want, schemaChildren())
	}
	if err := exec("the origin's completion", "UPDATE "+originTable+" SET completed_at = now() WHERE completed_at IS NULL"); err != nil {
		return CreateResult{}, err
	}
	return CreateResult{Created: true, Tables: tables, Children: children, Took: clock.Since(clk, t0)}, nil
}

type originState int

const (
	originNone originState = iota
	originUnfinished
	originComplete
)

// readOrigin reads ffscan.schema_origin, if there is one.
func readOrigin(ctx context.Context, db querier) (originState, error) {
	var reg *string
	if err := db.QueryRow(ctx, "SELECT to_regclass($1)::text", originTable).Scan(&reg); err != nil {
		return 0, fmt.Errorf("postgres: look for %s: %w", originTable, err)
	}
	if reg == nil {
		return originNone, nil
	}
	var rows, done int
	if err := db.QueryRow(ctx, "SELECT count(*), count(completed_at) FROM "+originTable).Scan(&rows, &done); err != nil {
		return 0, fmt.Errorf("postgres: read %s: %w", originTable, err)
	}
	switch {
	case rows == 0:
		return originNone, nil
	case done == rows:
		return originComplete, nil
	default:
		return originUnfinished, nil
	}
}

// refuseForeign refuses to create tables in a database that FlowFabric
// migrated or that already holds some of the tables.
func refuseForeign(ctx context.Context, db querier) error {
	var ledger *string
	if err := db.QueryRow(ctx, "SELECT to_regclass('_sqlx_migrations')::text").Scan(&ledger); err != nil {
		return fmt.Errorf("postgres: look for the migration ledger: %w", err)
	}
	if ledger != nil {
		return errors.New("postgres: refusing to create the schema: the database has FlowFabric's migration ledger (_sqlx_migrations), so FlowFabric's migrations own it")
	}
	names := make([]string, len(schemaTables))
	for i, t := range schemaTables {
		names[i] = t.name
	}
	var found []string
	if err := db.QueryRow(ctx, "SELECT coalesce(array_agg(relname::text ORDER BY relname), '{}') FROM pg_class WHERE relname = ANY($1) AND relkind IN ('r', 'p') AND pg_table_is_visible(oid)", names).Scan(&found); err != nil {
		return fmt.Errorf("postgres: look for existing tables: %w", err)
	}
	if len(found) > 0 {
		const most = 5
		list := strings.Join(found[:min(len(found), most)], ", ")
		if len(found) > most {
			list += fmt.Sprintf(" and %d more", len(found)-most)
		}
		return fmt.Errorf("postgres: refusing to create the schema: the database already holds %s, which ffscan did not create", list)
	}
	return nil
}

// countTables counts the FlowFabric tables and their partitions.
func countTables(ctx context.Context, db querier) (tables, children int, err error) {
	names := make([]string, len(schemaTables))
	for i, t := range schemaTables {
		names[i] = t.name
	}
	err = db.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM pg_class WHERE relname = ANY($1) AND relkind IN ('r', 'p') AND pg_table_is_visible(oid)),
	(SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = ANY($1) AND p.relkind = 'p' AND pg_table_is_visible(p.oid))`, names).Scan(&tables, &children)
	if err != nil {
		err = fmt.Errorf("postgres: count the schema's tables: %w", err)
	}
	return tables, children, err
}

// schemaChildren is how many partitions the schema has.
func schemaChildren() int {
	n := 0
	for _, t := range schemaTables {
		n += t.children
	}
	return n
}

func (t table) createSQL() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (\n\t%s,\n\tPRIMARY KEY (%s))", t.name, strings.Join(t.columns, ",\n\t"), t.key)
	if t.children > 0 {
		b.WriteString(" PARTITION BY HASH (partition_key)")
	}
	return b.String()
}

// childName is the name of partition i: <table>_p<i>, or _p<iii> for the
// worker-registry tables.
func (t table) childName(i int) string {
	if t.wide {
		return fmt.Sprintf("%s_p%03d", t.name, i)
	}
	return fmt.Sprintf("%s_p%d", t.name, i)
}

func (t table) childrenSQL() string {
	var b strings.Builder
	for i := range t.children {
		fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES WITH (MODULUS %d, REMAINDER %d);\n",
			t.childName(i), t.name, t.children, i)
	}
	return b.String()
}

func (n notifier) createSQL() string {
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM pg_notify(%s, %s);
	RETURN NEW;
END
$fn$;
CREATE OR REPLACE TRIGGER %s AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()`,
		n.function, n.channel, n.payload, n.trigger, n.table, n.function)
}
