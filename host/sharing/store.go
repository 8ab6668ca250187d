package sharing

import (
	"context"
	"time"

	"github.com/ffscan/ffscan/keys"
)

// Store keeps the membership and the ownership entries the coordinators of
// one share read and write: Valkey (ValkeyStore, the keys below) or a
// Postgres database (host/sharing/pgstore, tables in ffscan's schema).
// What is decided from them (the assignment, which partitions to give up
// and to take, the fencing deadline) is the Coordinator's, the same for
// every store.
//
// Every expiry is by the store's own clock, the one clock all the hosts
// share: a host's clock never decides whether another host's entry
// lapsed. Each call is one round trip and one atomic step of the store (a
// script, a statement), so a store behind a pooler that hands each
// transaction its own connection works.
type Store interface {
	// Renew records member id until ttl from now, forgets the members whose
	// time passed, and returns the live members, id among them.
	Renew(ctx context.Context, id string, ttl time.Duration) ([]string, error)
	// Hold takes for id, until ttl from now, each of parts whose entry is
	// absent, lapsed or already id's (renewing it), and reports for each,
	// in parts' order, whether id holds it afterwards. An entry another
	// member holds and that has not lapsed is left to it.
	Hold(ctx context.Context, id string, ttl time.Duration, parts []keys.Partition) ([]bool, error)
	// Release removes the entries of parts that id holds (those another
	// member holds are left).
	Release(ctx context.Context, id string, parts []keys.Partition) error
	// Leave forgets member id at once.
	Leave(ctx context.Context, id string) error
	// Describe names the store and the share for the status and the logs
	// ("valkey", "postgres (filter none)").
	Describe() string
}

// RenewHolder is a Store that renews the membership and holds partitions
// in one call (the Postgres store: one round trip and one transaction).
// The coordinator's steady tick holds the partitions its last tick's
// members gave it, in that call, and corrects afterwards if the members
// changed (releasing what it held that is no longer its own, holding what
// is newly its own): a steady tick is then one call instead of two.
type RenewHolder interface {
	// RenewHold is Renew(id, ttl) and then Hold(id, ttl, parts), both or
	// neither done.
	RenewHold(ctx context.Context, id string, ttl time.Duration, parts []keys.Partition) (members []string, held []bool, err error)
}
