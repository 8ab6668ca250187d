package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// librarySQL is ffscan's function library (sql/library.sql): candidate
// reads and re-validating actions, the Postgres counterpart of the Lua
// library.
//
//go:embed sql/library.sql
var librarySQL string

// LibraryVersion is the version of librarySQL. It goes up with every
// change of the file; a database holding a newer version is refused (an
// older host must not replace what a newer one installed).
const LibraryVersion = 1

// libraryTable records the installed library: one row.
const libraryTable = OriginSchema + ".library"

// libraryLock is the advisory lock key under which hosts install the
// library, so that two hosts booting together take turns.
const libraryLock int64 = 0x6666_7363_616e_0002

// LibraryDigest is the sha256 (hex) of the library this ffscan carries.
func LibraryDigest() string {
	sum := sha256.Sum256([]byte(librarySQL))
	return hex.EncodeToString(sum[:])
}

// LibraryAction is what InstallLibrary did.
type LibraryAction string

const (
	LibraryCurrent   LibraryAction = "current"   // already installed, same version and digest
	LibraryInstalled LibraryAction = "installed" // there was none
	LibraryUpgraded  LibraryAction = "upgraded"  // an older version was replaced
)

// LibraryError refuses a library ffscan must not replace.
type LibraryError struct{ Detail string }

func (e *LibraryError) Error() string { return "postgres: ffscan's function library: " + e.Detail }

// InstallLibrary makes sure the database holds this ffscan's function
// library in the schema "ffscan": it installs it when there is none,
// replaces an older version, and refuses a newer one or the same version
// with other contents (a build whose library changed without a new
// version). Everything happens in one transaction under an advisory lock,
// so a concurrent host sees either the old library or the new one.
func InstallLibrary(ctx context.Context, pool *pgxpool.Pool) (LibraryAction, error) {
	var action LibraryAction
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", libraryLock); err != nil {
			return fmt.Errorf("postgres: take the library lock: %w", err)
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+OriginSchema+`;
CREATE TABLE IF NOT EXISTS `+libraryTable+` (
	version integer NOT NULL,
	sha256 text NOT NULL,
	installed_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("postgres: create %s: %w", libraryTable, err)
		}
		var (
			version int
			digest  string
		)
		err := tx.QueryRow(ctx, "SELECT version, sha256 FROM "+libraryTable+" ORDER BY version DESC LIMIT 1").Scan(&version, &digest)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			action = LibraryInstalled
		case err != nil:
			return fmt.Errorf("postgres: read %s: %w", libraryTable, err)
		case version > LibraryVersion:
			return &LibraryError{Detail: fmt.Sprintf("the database holds version %d, newer than this ffscan's %d: run a host at least as new as the one that installed it", version, LibraryVersion)}
		case version == LibraryVersion && digest != LibraryDigest():
			return &LibraryError{Detail: fmt.Sprintf("the database holds version %d with sha256 %.16s..., this ffscan carries version %d with %.16s...: the library changed without a new version", version, digest, LibraryVersion, LibraryDigest())}
		case version == LibraryVersion:
			action = LibraryCurrent
			return nil
		default:
			action = LibraryUpgraded
		}
		if _, err := tx.Exec(ctx, librarySQL); err != nil {
			return fmt.Errorf("postgres: install ffscan's function library version %d: %w", LibraryVersion, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+libraryTable); err != nil {
			return fmt.Errorf("postgres: record the library: %w", err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+libraryTable+" (version, sha256) VALUES ($1, $2)", LibraryVersion, LibraryDigest()); err != nil {
			return fmt.Errorf("postgres: record the library: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return action, nil
}
