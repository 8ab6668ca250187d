// Package postgres is the host's side of a FlowFabric Postgres database:
// the connection pool the host owns (plugins hold no credentials), the
// recognition of the schema it finds, before anything touches it, and the
// creation of an equivalent schema where FlowFabric is not there to
// migrate one. See docs/postgres-design.md for where this is going; today
// the host connects, recognises the schema and reports it.
package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is what Recognize found.
type Schema struct {
	// Source is "flowfabric" (migrated by FlowFabric's own migrator) or
	// "ffscan" (created by CreateSchema).
	Source string
	// Migration is the highest migration applied, or for "ffscan" the
	// FlowFabric migration the tables are equivalent to.
	Migration int64
}

// String describes the schema for logs and status.
func (s Schema) String() string {
	if s.Source == "ffscan" {
		return fmt.Sprintf("created by ffscan, equivalent to flowfabric migration %d", s.Migration)
	}
	return fmt.Sprintf("%s migration %d", s.Source, s.Migration)
}

// flowfabricMigrations are the SHA-384 checksums FlowFabric's migrator
// records in _sqlx_migrations for each migration file it ships (version
// 15 was never shipped); a ledger with exactly these proves the schema
// came from those files.
var flowfabricMigrations = map[int64]string{
	1:  "9ff7e96a98ffd0cfa2f3eb32e0f9482ad1905dc78cdc52bdb87e3d68794771a7f2e06a8294449ddd1b7f516beddf1b40",
	2:  "a81355439c91e16dd62e6f29169507b76db85605f688b815e3134d1956171b97b9581794f8af0f0fdb6780d3b2eb3ebd",
	3:  "9efca66d6be816411a9413c3aae787c5a154059c63866c1c03d6ceb2389b85b34328314258eb8c715c6ed9c91b5e4fa7",
	4:  "53be2f02f84d9de6969732cfe8fa3c50dc3d828ef50d0165bf88327594f27ec652f2c60cc97bd81212f93484751d03f9",
	5:  "964a72a0747971ebd580dd4b6bcf1999a972f59a14cc78d0ef47f7e4782829c0b3db5da94e803f086ccefab6b550c040",
	6:  "cc165744de11e412fe744823c98a9d18b5f697d6f64a95abc5971f060fa1a99bfdac126ddd9aff64534b04c3c9974490",
	7:  "c2f317da61d8b95b32f77857dc9524e8512bf8ed6051a03102dffc72b264a85b2df162d2e0235b34e0413f758f47a920",
	8:  "7238cd72a0fb711dc1ed014988955bcc5e87ca79979c42cfc33dac989eefcbc65d2f49099f942f4b67e02a870004cc19",
	9:  "011f4e616d5d1b52cfe78bfca35efc1464ca385d41443dc8195138aaadb751eb261aff29886fa1c370967164d2a34dcc",
	10: "4f13556be64c5b25ab533738226309624da50d06f877af407b111b6d7021405abd340c8f54d5e34af33a0b54fdc5e82e",
	11: "dcc06ee568795ad9d3f359457f9f0c4da9f4930f011a8e28285b4f20b70b927dd46b3eb798869d7ede96ff6a8809ab7c",
	12: "bc113a49b73b0bb5b1bfc64078fe8542058e73b8ad76e45f16936354f3d12460d83aca4518511354e6e0829dcd14ce56",
	13: "7c843e7d483dccecdcf783272e426bd3a0b8225d38d9a2384cd60e8f7e4ffb1fe36ceff0eb4a7dc1744bf89c1050df36",
	14: "d6c600cb1d2faf649bc2caa564169ebe73156797ab139a80ef2b9d3d720f21b929aef7832ad490d0dd979881eec3605b",
	16: "2a69a24097418ea8e0d8296bb2a0e4f37c95bbd7df6f41d1eb3c61afcd0a0078e56af5bd1a6f9e4647c1831a9a9c15ab",
	17: "b6d267f539120b8d454d528c4dbb8e54c44ffafadf25342dec3f176d30c8fa22a28c61b8c13fbabbabd56fde44f3f2fd",
	18: "8e46ca6420854d0381583e026e3824711efc4d09ddb7a6eb79120346a84aaf9ea7d695c3989d02a37a47d496a007156a",
	19: "c7558a668b756efec6453e66f1f9e28be58d01928a58963841a8d9773c3b65ccafc820402bdf4dc9628f0891c6a301f6",
	20: "818839cadb8c9fee615964951b6a788dbd8cfb44d4e6a6f6cb11ddcb471612e5dc45f7403f8d9146a8e3d067df316b7e",
	21: "8ef0d6feb183a6bd15ebc6f1dfa3d9a47004a84544daf56f675e28ef9ee365025d8e24333a77c82eb80255805a91b825",
	22: "fe57077fab6ff1cc0a114b47b57383b021273829376947e2028c20f29a10343d47340a809d042ef044e711d241b59005",
}

// FlowFabricChecksums returns, by migration version, the SHA-384 (hex)
// FlowFabric's migrator records for the files this ffscan knows.
func FlowFabricChecksums() map[int64]string { return maps.Clone(flowfabricMigrations) }

// KnownMigration is the FlowFabric migration this ffscan was written for.
const KnownMigration = 22

// UnknownSchemaError refuses a database whose schema ffscan does not know,
// saying what it found.
type UnknownSchemaError struct {
	Found string
}

func (e *UnknownSchemaError) Error() string {
	return fmt.Sprintf("postgres: refusing a schema this ffscan does not know: %s (it knows FlowFabric's schema at migration %d, recorded in _sqlx_migrations, and the equivalent it creates itself)", e.Found, KnownMigration)
}

// querier is what Recognize needs of a pool or connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ querier = (*pgxpool.Pool)(nil)

// Recognize accepts a schema ffscan knows: FlowFabric's migration ledger
// with exactly the migrations this ffscan knows, byte for byte (by their
// checksums), or the tables CreateSchema created and finished. Anything
// else is an *UnknownSchemaError saying what it found.
func Recognize(ctx context.Context, db querier) (Schema, error) {
	var ledger *string
	if err := db.QueryRow(ctx, "SELECT to_regclass('_sqlx_migrations')::text").Scan(&ledger); err != nil {
		return Schema{}, fmt.Errorf("postgres: look for the migration ledger: %w", err)
	}
	origin, err := readOrigin(ctx, db)
	if err != nil {
		return Schema{}, err
	}
	switch {
	case ledger != nil && origin != originNone:
		return Schema{}, &UnknownSchemaError{Found: "both FlowFabric's migration ledger (_sqlx_migrations) and ffscan's " + originTable + ": one of the two did not create these tables"}
	case origin == originUnfinished:
		return Schema{}, &UnknownSchemaError{Found: "ffscan's schema creation did not finish (" + originTable + " has no completed_at): run `ffscan postgres create-schema` again to complete it"}
	case origin == originComplete:
		return Schema{Source: "ffscan", Migration: KnownMigration}, nil
	case ledger == nil:
		return Schema{}, &UnknownSchemaError{Found: "no _sqlx_migrations table on the search_path: the database was not migrated by FlowFabric (to have ffscan create an equivalent schema, run `ffscan postgres create-schema`)"}
	}
	rows, err := db.Query(ctx, "SELECT version, success, checksum FROM _sqlx_migrations ORDER BY version")
	if err != nil {
		return Schema{}, fmt.Errorf("postgres: read _sqlx_migrations: %w", err)
	}
	type row struct {
		version  int64
		success  bool
		checksum []byte
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.version, &r.success, &r.checksum); err != nil {
			rows.Close()
			return Schema{}, fmt.Errorf("postgres: read _sqlx_migrations: %w", err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return Schema{}, fmt.Errorf("postgres: read _sqlx_migrations: %w", err)
	}
	var problems []string
	seen := map[int64]bool{}
	var highest int64
	for _, r := range got {
		seen[r.version] = true
		highest = max(highest, r.version)
		want, known := flowfabricMigrations[r.version]
		switch {
		case !known:
			problems = append(problems, fmt.Sprintf("migration %d is not one FlowFabric %d shipped", r.version, KnownMigration))
		case !r.success:
			problems = append(problems, fmt.Sprintf("migration %d is recorded as failed", r.version))
		case hex.EncodeToString(r.checksum) != want:
			problems = append(problems, fmt.Sprintf("migration %d has checksum %.16s..., not FlowFabric's %.16s...", r.version, hex.EncodeToString(r.checksum), want))
		}
	}
	var missing []string
	for _, v := range slices.Sorted(maps.Keys(flowfabricMigrations)) {
		if !seen[v] {
			missing = append(missing, strconv.FormatInt(v, 10))
		}
	}
	if len(missing) > 0 {
		problems = append(problems, "migrations "+strings.Join(missing, ",")+" are not applied")
	}
	if len(problems) > 0 {
		const most = 5
		if len(problems) > most {
			problems = append(problems[:most], fmt.Sprintf("and %d more", len(problems)-most))
		}
		return Schema{}, &UnknownSchemaError{Found: strings.Join(problems, "; ")}
	}
	return Schema{Source: "flowfabric", Migration: highest}, nil
}
