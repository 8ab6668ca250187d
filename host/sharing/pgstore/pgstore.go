// Package pgstore keeps the partition share of the hosts of one Postgres
// database (host/sharing) in two tables of ffscan's own schema,
// ffscan.share_member and ffscan.share_owner, through the functions of
// ffscan's library (share_renew, share_hold, share_release, share_leave;
// host/postgres/sql/library.sql). Each call is one statement in a
// transaction of its own, with every expiry by the database's clock:
// nothing depends on a session (no advisory lock, no prepared statement
// the host relies on), so the store works behind PgBouncer in transaction
// mode as well as on direct connections.
package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
	rows, err := s.pool.Query(ctx, "SELECT host_id, partitions FROM ffscan.share_renew($1, $2, $3, $4)", s.group, id, s.counts, ttl.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
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

// Hold takes or renews parts for id (share_hold).
func (s *Store) Hold(ctx context.Context, id string, ttl time.Duration, parts []keys.Partition) ([]bool, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	fams, idxs := args(parts)
	rows, err := s.pool.Query(ctx, "SELECT family, partition_index FROM ffscan.share_hold($1, $2, $3, $4, $5)", s.group, id, ttl.Milliseconds(), fams, idxs)
	if err != nil {
		return nil, fmt.Errorf("ownership: %w", err)
	}
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
	held := make([]bool, len(parts))
	for i := range parts {
		held[i] = got[entry{fams[i], idxs[i]}]
	}
	return held, nil
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
