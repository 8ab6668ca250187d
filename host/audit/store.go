package audit

import (
	"context"
	"time"
)

// Store is where the trail is kept: Valkey streams (valkey.go) or a table
// of ffscan's schema in Postgres (postgres.go). The Recorder keeps the
// queue, the batching, the counts and the trim's schedule; a store only
// writes, reads and trims, so that both behave alike above it.
type Store interface {
	// Name is the store's name in status ("valkey", "postgres").
	Name() string
	// Write appends a batch, each entry already bounded (Entry.bounded),
	// in one round trip. It returns how many entries were not written
	// and, if any, the first error.
	Write(ctx context.Context, batch []Entry) (failed int, err error)
	// Trim drops the entries older than before (the store's own clock
	// stamped them; before is the host's clock less MaxAge).
	Trim(ctx context.Context, before time.Time) error
	// Query reads the entries f selects, newest first, at most f.Limit.
	// The Recorder gives it f normalised: Execution canonical, Within
	// folded into Since, Limit set.
	Query(ctx context.Context, f Filter) ([]Entry, error)
}
