package audit

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"
)

// AppendValkey and AppendPostgres write one entry at once, outside any
// Recorder: the record of an operator action taken by a command that runs
// no host (`ffscan plugins approve`, `pin --write`, `install`), which no
// running host's recorder sees. e must carry its kind, host and channel;
// its time is the store's, as for every entry; the store's bound applies
// as at a Recorder's writes.
func AppendValkey(ctx context.Context, client valkey.Client, maxEntries int64, e Entry) error {
	return appendTo(ctx, &valkeyStore{client: client, maxEntries: orDefault(maxEntries)}, e)
}

// AppendPostgres is AppendValkey on a database holding ffscan's library.
func AppendPostgres(ctx context.Context, pool *pgxpool.Pool, maxEntries int64, e Entry) error {
	return appendTo(ctx, &pgStore{pool: pool, maxEntries: orDefault(maxEntries)}, e)
}

func appendTo(ctx context.Context, s Store, e Entry) error {
	_, err := s.Write(ctx, []Entry{e.bounded()})
	return err
}

func orDefault(maxEntries int64) int64 {
	if maxEntries <= 0 {
		return DefaultMaxEntries
	}
	return maxEntries
}
