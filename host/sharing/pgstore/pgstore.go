// Package pgstore keeps the partition share of the hosts of one Postgres
// database (host/sharing) in two tables of ffscan's own schema,
// ffscan.share_member and ffscan.share_owner, through the functions of
// ffscan's library (share_renew, share_hold, share_release, share_leave;
// host/postgres/sql/library.sql). Each call is one statement in a
// transaction of its own (RenewHold: two statements pipelined in one
// implicit transaction), with every expiry by the database's clock:
// nothing depends on a session (no advisory lock, no prepared statement
// the host relies on), so the store works behind PgBouncer in transaction
// mode as well as on direct connections.
package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Store is one share (the hosts with one filter) on one database.
type Store struct {
	pool   *pgxpool.Pool
	group  string
	filter string
	counts string
}

// New returns the store of the share of the hosts that run with filter
// and partition counts parts on the database of pool. Hosts with another
// filter form a share of their own (they serve other tenants' rows);
// hosts with other partition counts are refused (Renew fails, saying so).
func New(pool *pgxpool.Pool, filter scannerapi.Filter, parts keys.PartitionConfig) *Store {
	return &Store{pool: pool, group: Group(filter), filter: filter.String(), counts: Counts(parts)}
}

// Group is the share_group of the hosts with filter: "" without one, else
// the filter as a JSON array [namespace, tag key, tag value].
func Group(f scannerapi.Filter) string {
	if f.IsNoop() {
		return ""
	}
	b, _ := json.Marshal([]string{f.Namespace, f.TagKey, f.TagValue})
	return string(b)
}

// Counts is how share_member records partition counts.
func Counts(p keys.PartitionConfig) string {
	return fmt.Sprintf("%d/%d/%d", p.Flow, p.Budget, p.Quota)
}

// Describe names the store and its share.
func (s *Store) Describe() string { return "postgres (filter " + s.filter + ")" }

// CountsError refuses to share with a host that counts the partitions
// otherwise: each host takes only the partitions it counts, so the others'
// assignment would leave some to nobody.
type CountsError struct {
	Host, Theirs, Ours string
}

func (e *CountsError) Error() string {
	return fmt.Sprintf("host %s shares this database with partitions flow/budget/quota %s, this host runs with %s: "+
		"give every host of one database the same partitions.* (FlowFabric's own counts)", e.Host, e.Theirs, e.Ours)
}

// Renew renews id's membership (share_renew) and returns the live members.
func (s *Store) Renew(ctx context.Context, id string, ttl time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, renewSQL, s.renewArgs(id, ttl)...)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	return s.members(rows)
}

const (
	renewSQL = "SELECT host_id, partitions FROM ffscan.share_renew($1, $2, $3, $4)"
	holdSQL  = "SELECT family, partition_index FROM ffscan.share_hold($1, $2, $3, $4, $5)"
)

func (s *Store) renewArgs(id string, ttl time.Duration) []any {
	return []any{s.group, id, s.counts, ttl.Milliseconds()}
}

// members reads share_renew's rows: the live members, refused when one
// counts the partitions otherwise.
func (s *Store) members(rows pgx.Rows) ([]string, error) {
	defer rows.Close()
	var members []string
	var mismatch *CountsError
	for rows.Next() {
		var host, counts string
		if err := rows.Scan(&host, &counts); err != nil {
			return nil, fmt.Errorf("membership: %w", err)
		}
		if counts != s.counts && mismatch == nil {
			mismatch = &CountsError{Host: host, Theirs: counts, Ours: s.counts}
		}
		members = append(members, host)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	if mismatch != nil {
		return nil, mismatch
	}
	return members, nil
}

// args are parts as share_hold's and share_release's two arrays.
func args(parts []keys.Partition) ([]string, []int16) {
	fams := make([]string, len(parts))
	idxs := make([]int16, len(parts))
	for i, p := range parts {
		fams[i], idxs[i] = p.Family.String(), int16(p.Index)
	}
	return fams, idxs
}

func (s *Store) holdArgs(id string, ttl time.Duration, parts []keys.Partition) []any {
	fams, idxs := args(parts)
	return []any{s.group, id, ttl.Milliseconds(), fams, idxs}
}

// Hold takes or renews parts for id (share_hold).
func (s *Store) Hold(ctx context.Context, id string, ttl time.Duration, parts []keys.Partition) ([]bool, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, holdSQL, s.holdArgs(id, ttl, parts)...)
	if err != nil {
		return nil, fmt.Errorf("ownership: %w", err)
	}
	return held(rows, parts)
}

// held reads share_hold's rows: for each of parts, in order, whether it
// is held.
func held(rows pgx.Rows, parts []keys.Partition) ([]bool, error) {
	defer rows.Close()
	type entry struct {
		fam string
		idx int16
	}
	got := map[entry]bool{}
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.fam, &e.idx); err != nil {
			return nil, fmt.Errorf("ownership: %w", err)
		}
		got[e] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ownership: %w", err)
	}
	fams, idxs := args(parts)
	out := make([]bool, len(parts))
	for i := range parts {
		out[i] = got[entry{fams[i], idxs[i]}]
	}
	return out, nil
}

// RenewHold is Renew and then Hold of parts, sent together: one round
// trip and one transaction (a pipelined batch is one implicit
// transaction, and behind a transaction pooler one server connection). If
// either statement fails, neither is kept. A host's steady tick is this
// one call instead of two transactions (sharing.RenewHolder).
func (s *Store) RenewHold(ctx context.Context, id string, ttl time.Duration, parts []keys.Partition) ([]string, []bool, error) {
	if len(parts) == 0 {
		members, err := s.Renew(ctx, id, ttl)
		return members, nil, err
	}
	b := &pgx.Batch{}
	b.Queue(renewSQL, s.renewArgs(id, ttl)...)
	b.Queue(holdSQL, s.holdArgs(id, ttl, parts)...)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("membership: %w", err)
	}
	// A refusal (another member counts the partitions otherwise) fails
	// the tick; the hold sent with it is done all the same, on partitions
	// this host's last tick gave it: they lapse a tick later than they
	// would have, and this host stops acting on them at its deadline.
	members, err := s.members(rows)
	if err != nil {
		return nil, nil, err
	}
	if rows, err = br.Query(); err != nil {
		return nil, nil, fmt.Errorf("ownership: %w", err)
	}
	got, err := held(rows, parts)
	if err != nil {
		return nil, nil, err
	}
	// The implicit transaction commits at the batch's end: an error there
	// (a serialization failure at commit, a dropped connection) means
	// nothing of it may be taken as kept.
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("membership and ownership: %w", err)
	}
	return members, got, nil
}

// Release gives up those of parts id holds (share_release).
func (s *Store) Release(ctx context.Context, id string, parts []keys.Partition) error {
	if len(parts) == 0 {
		return nil
	}
	fams, idxs := args(parts)
	if _, err := s.pool.Exec(ctx, "SELECT ffscan.share_release($1, $2, $3, $4)", s.group, id, fams, idxs); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// Leave forgets member id (share_leave).
func (s *Store) Leave(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, "SELECT ffscan.share_leave($1, $2)", s.group, id); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}
