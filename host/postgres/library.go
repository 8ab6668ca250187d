package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/sdk/scannerapi"
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
const LibraryVersion = 8

// dropLibrarySQL drops every function of the schema "ffscan" (nothing of
// FlowFabric's depends on them).
const dropLibrarySQL = `DO $drop$
DECLARE f regprocedure;
BEGIN
	FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'ffscan' LOOP
		EXECUTE 'DROP FUNCTION ' || f::text;
	END LOOP;
END
$drop$`

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
		if action == LibraryUpgraded {
			// Functions the new version renamed or re-typed would stay
			// behind as overloads: the schema's functions are all the
			// library's, so they go first.
			if _, err := tx.Exec(ctx, dropLibrarySQL); err != nil {
				return fmt.Errorf("postgres: remove the old library: %w", err)
			}
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

// Action is an action function of the library.
type Action struct {
	// Args is how many arguments it takes.
	Args int
	// Serializable runs it in a SERIALIZABLE transaction (FlowFabric's
	// budget reset is), retried on a serialization failure. The others run
	// as one statement at READ COMMITTED: each reads what it decides on
	// under the row locks it takes (FOR UPDATE), which is all they need.
	Serializable bool
	// Batch, when set, is the function's batch form, which the host runs
	// for several calls on one partition (CallBatch): it takes the
	// partition key, then an array per other argument (of the types in
	// BatchTypes), then the filter, and returns (ord integer, reply
	// text[]), one row per call, each decided exactly as the function
	// decides it, in one transaction.
	Batch      string
	BatchTypes []string
}

// ActionFunctions are the library functions a plugin may call (PGCALL),
// by name. Each returns text[] in the shape of FlowFabric's Lua replies.
// A plugin declares the ones it calls as "pg:<name>" in Info.Functions.
// Args counts the plugin's arguments; the host adds its filter's three
// (see Call).
var ActionFunctions = map[string]Action{
	"expire_lapsed_lease":       {Args: 3, Batch: "expire_lapsed_leases", BatchTypes: []string{"uuid", "integer"}}, // partition_key, execution uuid, attempt index
	"release_stale_lease":       {Args: 3},                                                                         // partition_key, execution uuid, attempt index
	"expire_execution_deadline": {Args: 2},                                                                         // partition_key, execution uuid
	"promote_delayed":           {Args: 2},                                                                         // partition_key, execution uuid
	"expire_pending_waitpoint":  {Args: 2},                                                                         // partition_key, waitpoint uuid
	"expire_suspension":         {Args: 3},                                                                         // partition_key, execution uuid, suspension uuid
	"reset_budget":              {Args: 2, Serializable: true},                                                     // partition_key, budget id
	"dispatch_completion":       {Args: 2},                                                                         // partition_key, completion event id (READ COMMITTED: see dispatch_completions in library.sql)
	"dispatch_sibling_cancels":  {Args: 3},                                                                         // partition_key, flow uuid, downstream uuid
	"reconcile_sibling_cancels": {Args: 3},                                                                         // partition_key, flow uuid, downstream uuid
	"sweep_worker":              {Args: 2},                                                                         // flow partition_key, '<registry partition>/[namespace, instance]'
}

// CandidateFunctions are the library functions a Postgres candidate source
// may name (CandidateSource.Key). Each takes (partitions smallint[],
// per_partition integer, partition_count integer) and the host's filter
// (namespace, tag key, tag value) and returns (partition_key, member,
// score): the due rows, at most per_partition per partition. The
// time-scored ones also have a companion in NextDueFunctions.
var CandidateFunctions = map[string]bool{
	"lapsed_leases":            true,
	"stale_leases":             true,
	"deadlines_passed":         true,
	"delays_due":               true,
	"waitpoints_expired":       true,
	"suspensions_timed_out":    true,
	"budgets_due":              true,
	"completions_undispatched": true,
	"completions_pending":      true,
	"cancel_groups_pending":    true,
	"workers_expired":          true,
}

// NextDueFunctions maps each time-scored candidate function to its
// companion (library version 4) that returns, per partition, the entry due
// next: (partition_key, member, due_at_ms), at most one row per partition
// asked, from (partitions smallint[], partition_count integer, as_of_ms
// bigint) and the filter. That row is the earliest entry meeting every
// condition of the candidate function except its time bound, which it
// fails at as_of_ms (the exact complement: < against <=, on the same
// stored or computed time), and due_at_ms is the first database
// millisecond at which the bound holds for it. The functions absent here
// (completions_undispatched, completions_pending, cancel_groups_pending)
// are not time-scored: their scanners poll.
var NextDueFunctions = map[string]string{
	"lapsed_leases":         "lapsed_leases_next",
	"stale_leases":          "stale_leases_next",
	"deadlines_passed":      "deadlines_passed_next",
	"delays_due":            "delays_due_next",
	"waitpoints_expired":    "waitpoints_expired_next",
	"suspensions_timed_out": "suspensions_timed_out_next",
	"budgets_due":           "budgets_due_next",
	"workers_expired":       "workers_expired_next",
}

// Now reads the database's clock in Unix milliseconds: the "now" of a
// Postgres scanner's cycle, the clock every library function compares
// against.
func Now(ctx context.Context, db querier) (int64, error) {
	var ms int64
	if err := db.QueryRow(ctx, "SELECT ffscan.now_ms()").Scan(&ms); err != nil {
		return 0, fmt.Errorf("postgres: read the clock: %w", err)
	}
	return ms, nil
}

// filterArgs are the three filter arguments every candidate and action
// function takes last (ffscan.keeps): the namespace, the tag key and the
// tag value, NULL for a part that is not set.
func filterArgs(f scannerapi.Filter) []any {
	args := []any{nil, nil, nil}
	if f.Namespace != "" {
		args[0] = f.Namespace
	}
	if f.TagKey != "" {
		args[1], args[2] = f.TagKey, f.TagValue
	}
	return args
}

// partitionKeys are partition indexes as the smallint[] the candidate
// functions take.
func partitionKeys(parts []uint16) []int16 {
	ps := make([]int16, len(parts))
	for i, p := range parts {
		ps[i] = int16(p)
	}
	return ps
}

// Candidate is one row of a candidate function.
type Candidate struct {
	Partition uint16
	Member    string
	Score     int64
}

// ReadCandidates runs candidate function fn for the given partitions of a
// family of count partitions, at most perPartition rows each, in one
// query. Rows the filter does not keep are left out. share, when not nil,
// is every partition the host reads of the family (Readers.Share): a read
// of more than a few of them runs as a share read (shareQuery), with the
// same rows.
func ReadCandidates(ctx context.Context, db querier, fn string, parts, share []uint16, count uint16, perPartition int, f scannerapi.Filter) ([]Candidate, error) {
	sql, args, err := dueQuery(fn, parts, count, perPartition, f)
	if err != nil {
		return nil, err
	}
	if s, a, ok := shareQuery(fn, parts, share, count, perPartition, false, "", filterArgs(f)); ok {
		sql, args = s, a
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", fn, err)
	}
	due, _, err := scanCandidates(rows, false)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", fn, err)
	}
	return due, nil
}

// dueQuery is candidate function fn's read: for the partitions given of a
// family of count, at most perPartition rows each.
func dueQuery(fn string, parts []uint16, count uint16, perPartition int, f scannerapi.Filter) (string, []any, error) {
	if !CandidateFunctions[fn] {
		return "", nil, fmt.Errorf("postgres: %q is not a candidate function of ffscan's library", fn)
	}
	// fn is one of CandidateFunctions' names, never a plugin's string.
	return "SELECT partition_key, member, score FROM ffscan." + fn + "($1, $2, $3, $4, $5, $6)",
		append([]any{partitionKeys(parts), perPartition, int(count)}, filterArgs(f)...), nil
}

// dueAndNextQuery is a time-scored candidate function fn's read with its
// next-due companion's (ReadCandidatesNext), the companion's as_of_ms the
// SQL expression asOf; a fourth column tells a due row (true) from a
// next-due one.
func dueAndNextQuery(fn string, parts []uint16, count uint16, perPartition int, asOf string, f scannerapi.Filter) (string, []any, error) {
	next, ok := NextDueFunctions[fn]
	if !ok {
		return "", nil, fmt.Errorf("postgres: %q is not a time-scored candidate function of ffscan's library", fn)
	}
	// fn and next are names of the library's, asOf a constant of this
	// package's, never a plugin's string.
	return "SELECT partition_key, member, score, true FROM ffscan." + fn + "($1, $2, $3, $4, $5, $6)" +
			" UNION ALL SELECT partition_key, member, due_at_ms, false FROM ffscan." + next + "($1, $3, " + asOf + ", $4, $5, $6)",
		append([]any{partitionKeys(parts), perPartition, int(count)}, filterArgs(f)...), nil
}

// scanCandidates reads a candidate read's rows: with next, those of
// dueAndNextQuery, split into the due rows and each partition's earliest
// next-due one (partitions with nothing to come absent); without, those of
// dueQuery. It closes rows.
func scanCandidates(rows pgx.Rows, next bool) ([]Candidate, map[uint16]NextDue, error) {
	defer rows.Close()
	var (
		due   []Candidate
		nexts map[uint16]NextDue
	)
	if next {
		nexts = map[uint16]NextDue{}
	}
	for rows.Next() {
		var (
			c     Candidate
			pk    int16
			isDue = true
			err   error
		)
		if next {
			err = rows.Scan(&pk, &c.Member, &c.Score, &isDue)
		} else {
			err = rows.Scan(&pk, &c.Member, &c.Score)
		}
		if err != nil {
			return nil, nil, err
		}
		c.Partition = uint16(pk)
		if isDue {
			due = append(due, c)
			continue
		}
		if n, seen := nexts[c.Partition]; !seen || c.Score < n.AtMs {
			nexts[c.Partition] = NextDue{Member: c.Member, AtMs: c.Score}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return due, nexts, nil
}

// NextDue is a partition's entry due next (NextDueFunctions).
type NextDue struct {
	Member string
	// AtMs is when it falls due, database clock, Unix ms.
	AtMs int64
}

// ReadCandidatesNext is ReadCandidates for a time-scored function fn
// (NextDueFunctions), which also returns, in the same query, each
// partition's entry due next: the earliest one not due at asOfMs, the
// database clock the caller read before (Now). Partitions with nothing to
// come are absent from the map. An entry that was not due when the due
// read came to it was not due at asOfMs either, so it is never in neither
// part; one that came due in between may be in both, and then next is
// already due, which only wakes the caller early.
func ReadCandidatesNext(ctx context.Context, db querier, fn string, parts []uint16, count uint16, perPartition int, asOfMs int64, f scannerapi.Filter) ([]Candidate, map[uint16]NextDue, error) {
	sql, args, err := dueAndNextQuery(fn, parts, count, perPartition, "$7", f)
	if err != nil {
		return nil, nil, err
	}
	rows, err := db.Query(ctx, sql, append(args, asOfMs)...)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %s: %w", fn, err)
	}
	due, nexts, err := scanCandidates(rows, true)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %s: %w", fn, err)
	}
	return due, nexts, nil
}

// MaxCounted bounds CountCandidates per partition: a backlog gauge that
// reads this many is at least this many.
const MaxCounted = 1_000_000

// CountCandidates counts what candidate function fn would return for the
// given partitions with no batch limit (up to MaxCounted each), by
// partition: the due backlog of partitions whose read came back full.
// Partitions with none are absent from the map.
func CountCandidates(ctx context.Context, db querier, fn string, parts []uint16, count uint16, f scannerapi.Filter) (map[uint16]int64, error) {
	if !CandidateFunctions[fn] {
		return nil, fmt.Errorf("postgres: %q is not a candidate function of ffscan's library", fn)
	}
	ps := partitionKeys(parts)
	rows, err := db.Query(ctx, "SELECT partition_key, count(*) FROM ffscan."+fn+"($1, $2, $3, $4, $5, $6) GROUP BY partition_key",
		append([]any{ps, MaxCounted, int(count)}, filterArgs(f)...)...)
	if err != nil {
		return nil, fmt.Errorf("postgres: count %s: %w", fn, err)
	}
	out := map[uint16]int64{}
	for rows.Next() {
		var (
			pk int16
			n  int64
		)
		if err := rows.Scan(&pk, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: count %s: %w", fn, err)
		}
		out[uint16(pk)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: count %s: %w", fn, err)
	}
	return out, nil
}

// serializationTries bounds the runs of an action that keeps failing on a
// serialization failure or a deadlock (SQLSTATE 40001, 40P01): each such
// failure means another transaction committed first, so the action is run
// again at once. (Completions dispatched side by side under SERIALIZABLE
// failed so, 0.5-0.7 times per item in the Postgres hosts benchmark; they
// run at READ COMMITTED now, where only a deadlock can roll one back.)
const serializationTries = 10

// Call runs action function fn with args (text, converted by the server to
// the function's parameter types) in a transaction of its own and returns
// its reply. A serialization failure or deadlock is retried (up to
// serializationTries runs in all): the function re-validates, so running
// it again is safe. The filter goes to the function as its last three
// arguments: an execution it does not keep is answered {'1','filtered'}
// and left.
func Call(ctx context.Context, db *pgxpool.Pool, fn string, args []string, f scannerapi.Filter) ([]*string, error) {
	action, ok := ActionFunctions[fn]
	if !ok {
		return nil, fmt.Errorf("postgres: %q is not an action function of ffscan's library", fn)
	}
	n := action.Args
	if len(args) != n {
		return nil, fmt.Errorf("postgres: %s takes %d arguments, got %d", fn, n, len(args))
	}
	var sql strings.Builder
	sql.WriteString("SELECT ffscan." + fn + "(")
	params := make([]any, 0, n+3)
	for _, a := range args {
		params = append(params, a)
	}
	params = append(params, filterArgs(f)...)
	for i := range params {
		if i > 0 {
			sql.WriteString(", ")
		}
		fmt.Fprintf(&sql, "$%d", i+1)
	}
	sql.WriteString(")")
	var err error
	for try := 1; try <= serializationTries; try++ {
		var out []*string
		if action.Serializable {
			err = pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, sql.String(), params...).Scan(&out)
			})
		} else {
			err = db.QueryRow(ctx, sql.String(), params...).Scan(&out)
		}
		if err == nil {
			return out, nil
		}
		if !retryable(err) {
			break
		}
	}
	return nil, err
}

// MaxBatch bounds the calls of one CallBatch statement, and so the row
// locks one transaction holds (a worker renewing one of them waits for
// its commit).
const MaxBatch = 100

// CallBatch runs the batch form of action function fn (Action.Batch) for
// calls, each the function's arguments (the first, the partition key, the
// same in every call), in one statement and so one transaction, at READ
// COMMITTED, and returns one reply per call, in their order. A deadlock
// rolls the batch back and it is run again (up to serializationTries runs
// in all). Any other error fails the batch whole, nothing applied: the
// caller runs the calls one by one (Call), so that each gets its own
// reply (a malformed argument its own error).
func CallBatch(ctx context.Context, db *pgxpool.Pool, fn string, calls [][]string, f scannerapi.Filter) ([][]*string, error) {
	action, ok := ActionFunctions[fn]
	if !ok || action.Batch == "" {
		return nil, fmt.Errorf("postgres: %q has no batch form in ffscan's library", fn)
	}
	if len(calls) == 0 || len(calls) > MaxBatch {
		return nil, fmt.Errorf("postgres: a batch of %s takes 1 to %d calls, got %d", fn, MaxBatch, len(calls))
	}
	cols := make([][]string, action.Args-1)
	for _, c := range calls {
		if len(c) != action.Args {
			return nil, fmt.Errorf("postgres: %s takes %d arguments, got %d", fn, action.Args, len(c))
		}
		if c[0] != calls[0][0] {
			return nil, fmt.Errorf("postgres: a batch of %s is of one partition, got %q and %q", fn, calls[0][0], c[0])
		}
		for i := range cols {
			cols[i] = append(cols[i], c[i+1])
		}
	}
	var sql strings.Builder
	// The batch function and its types are the library's, never a
	// plugin's strings.
	sql.WriteString("SELECT ord, reply FROM ffscan." + action.Batch + "($1::smallint")
	params := []any{calls[0][0]}
	for i, col := range cols {
		params = append(params, col)
		fmt.Fprintf(&sql, ", $%d::text[]::%s[]", len(params), action.BatchTypes[i])
	}
	for _, a := range filterArgs(f) {
		params = append(params, a)
		fmt.Fprintf(&sql, ", $%d", len(params))
	}
	sql.WriteString(")")
	var err error
	for try := 1; try <= serializationTries; try++ {
		var out [][]*string
		if out, err = callBatchOnce(ctx, db, sql.String(), params, len(calls)); err == nil {
			return out, nil
		}
		if !retryable(err) {
			break
		}
	}
	return nil, fmt.Errorf("postgres: %s: %w", action.Batch, err)
}

func callBatchOnce(ctx context.Context, db *pgxpool.Pool, sql string, params []any, n int) ([][]*string, error) {
	rows, err := db.Query(ctx, sql, params...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([][]*string, n)
	seen := make([]bool, n)
	got := 0
	for rows.Next() {
		var (
			ord   int32
			reply []*string
		)
		if err := rows.Scan(&ord, &reply); err != nil {
			return nil, err
		}
		if ord < 1 || int(ord) > n || seen[ord-1] {
			return nil, fmt.Errorf("a reply for call %d of %d, or a second one", ord, n)
		}
		out[ord-1], seen[ord-1] = reply, true
		got++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("%d replies for %d calls", got, n)
	}
	return out, nil
}

// Dispatched is the reply to one event of DispatchCompletions.
type Dispatched struct {
	Event int64
	Reply []*string
}

// DispatchCompletions dispatches completion events evs of partition pk,
// in that order, in one statement and so one transaction
// (ffscan.dispatch_completions: each event exactly as dispatch_completion
// does it, with its reply), at READ COMMITTED. A deadlock (another
// transaction locking the same rows in another order: the dependency
// reconciler's dispatch of one of them) rolls the batch back, and it is
// run again, up to serializationTries times in all.
func DispatchCompletions(ctx context.Context, db *pgxpool.Pool, pk uint16, evs []int64, f scannerapi.Filter) ([]Dispatched, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	args := append([]any{int16(pk), evs}, filterArgs(f)...)
	var err error
	for try := 1; try <= serializationTries; try++ {
		var out []Dispatched
		var rows pgx.Rows
		rows, err = db.Query(ctx, "SELECT event_id, reply FROM ffscan.dispatch_completions($1, $2, $3, $4, $5)", args...)
		if err == nil {
			for rows.Next() {
				var d Dispatched
				if err = rows.Scan(&d.Event, &d.Reply); err != nil {
					break
				}
				out = append(out, d)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err == nil {
			return out, nil
		}
		if !retryable(err) {
			break
		}
	}
	return nil, fmt.Errorf("postgres: dispatch_completions: %w", err)
}

// retryable says whether err is a serialization failure or a deadlock.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}
