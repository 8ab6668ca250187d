package callbacks

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/internal/pgtest"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

var pgInfo = scannerapi.Info{
	Name:      "pg",
	Commands:  []string{"GET", "SET"},
	Functions: []string{"pg:expire_lapsed_lease", "ff_version"},
}

// TestPGCallRefusals: a PGCALL runs only a declared ("pg:") action function
// of ffscan's library, with its arity, on a host with a database, outside
// dry runs; each refusal is counted and changes nothing.
func TestPGCallRefusals(t *testing.T) {
	svc, _, rec := setup(t, pgInfo, false)
	eid := "6a1e7c52-0d4b-4f7e-9a51-000000000001"
	replies, err := svc.Exec(context.Background(), "pg", []scannerapi.Command{
		{"PGCALL", "expire_lapsed_lease", "1", eid, "0"}, // no database on this host
		{"PGCALL", "lapsed_leases", "1", "1"},            // a candidate function, not declared
		{"PGCALL", "expire_lapsed_lease", "1", eid},      // arity
		{"PGCALL"},                           // no function
		scannerapi.PGCall("drop_everything"), // not declared
	})
	require.NoError(t, err)
	assert.Contains(t, replies[0].Err, ReasonNoDatabase)
	assert.Contains(t, replies[1].Err, ReasonUndeclaredFunction)
	assert.Contains(t, replies[2].Err, "takes 3 arguments, got 2")
	assert.Contains(t, replies[3].Err, ReasonArity)
	assert.Contains(t, replies[4].Err, ReasonUndeclaredFunction)
	for _, r := range replies {
		assert.Equal(t, scannerapi.ErrRefused, r.ErrClass)
	}
	assert.Equal(t, 1, rec.refused[ReasonNoDatabase])

	// A declared name that the library does not have.
	svc2, _, _ := setup(t, scannerapi.Info{Name: "pg2", Functions: []string{"pg:drop_everything"}}, false)
	replies, err = svc2.Exec(context.Background(), "pg2", []scannerapi.Command{scannerapi.PGCall("drop_everything")})
	require.NoError(t, err)
	assert.Contains(t, replies[0].Err, ReasonUnsupported)

	dry, _, _ := setup(t, pgInfo, true)
	replies, err = dry.Exec(context.Background(), "pg", []scannerapi.Command{{"PGCALL", "expire_lapsed_lease", "1", eid, "0"}})
	require.NoError(t, err)
	assert.Contains(t, replies[0].Err, ReasonDryRun)
}

// TestPGCallRuns: PGCALLs run on the database in their own transactions,
// mixed with Valkey commands in one batch whose order is kept; the
// database's errors come back as class server.
func TestPGCallRuns(t *testing.T) {
	t.Parallel()
	svc, _, _ := setup(t, pgInfo, false)
	ctx := context.Background()
	srv := pgtest.New(t)
	dsn, err := srv.CreateDatabase(ctx, "ff")
	require.NoError(t, err)
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 4})
	require.NoError(t, err)
	defer pool.Close()
	_, err = postgres.CreateSchema(ctx, pool)
	require.NoError(t, err)
	_, err = postgres.InstallLibrary(ctx, pool)
	require.NoError(t, err)
	svc.SetPostgres(pool, scannerapi.Filter{})

	cmds := []scannerapi.Command{{"SET", "ff:a", "1"}}
	for i := range 9 {
		// Attempts that do not exist: each call answers its no-op.
		cmds = append(cmds, scannerapi.PGCall("expire_lapsed_lease", "3", "6a1e7c52-0d4b-4f7e-9a51-00000000000"+string(rune('1'+i)), "0"))
	}
	cmds = append(cmds, scannerapi.Command{"GET", "ff:a"}, scannerapi.PGCall("expire_lapsed_lease", "x3", "not-a-uuid", "0"))
	replies, err := svc.Exec(ctx, "pg", cmds)
	require.NoError(t, err)
	require.Len(t, replies, len(cmds))
	assert.Equal(t, "OK", replies[0].Str)
	for _, r := range replies[1:10] {
		fr, err := scannerapi.ParseFunctionReply(r)
		require.NoError(t, err)
		assert.True(t, fr.Success)
		assert.Equal(t, "attempt_not_found", fr.Status)
	}
	assert.Equal(t, "1", replies[10].Str, "the Valkey command after the PGCALLs kept its place")
	assert.Equal(t, scannerapi.KindError, replies[11].Kind)
	assert.Equal(t, scannerapi.ErrServer, replies[11].ErrClass)
	assert.Contains(t, replies[11].Err, "invalid input syntax")

	// The nine calls on partition 3 ran as one batch. A batch with a
	// malformed call fails whole and is run call by call: each call gets
	// its own reply.
	cmds = []scannerapi.Command{
		scannerapi.PGCall("expire_lapsed_lease", "3", "6a1e7c52-0d4b-4f7e-9a51-00000000000a", "0"),
		scannerapi.PGCall("expire_lapsed_lease", "3", "not-a-uuid", "0"),
		scannerapi.PGCall("expire_lapsed_lease", "3", "6a1e7c52-0d4b-4f7e-9a51-00000000000b", "0"),
	}
	replies, err = svc.Exec(ctx, "pg", cmds)
	require.NoError(t, err)
	require.Len(t, replies, 3)
	for _, r := range []scannerapi.Reply{replies[0], replies[2]} {
		fr, err := scannerapi.ParseFunctionReply(r)
		require.NoError(t, err)
		assert.Equal(t, "attempt_not_found", fr.Status)
	}
	assert.Equal(t, scannerapi.ErrServer, replies[1].ErrClass)
	assert.Contains(t, replies[1].Err, "invalid input syntax")
}

// TestPGUnits: calls of a function with a batch form go together by
// partition, in their order, up to postgres.MaxBatch; other calls alone.
func TestPGUnits(t *testing.T) {
	call := func(fn string, args ...string) op { return op{pg: &pgCall{function: fn, args: args}} }
	ops := []op{
		call("expire_lapsed_lease", "1", "a", "0"),
		call("promote_delayed", "1", "b"),
		call("expire_lapsed_lease", "2", "c", "0"),
		call("expire_lapsed_lease", "1", "d", "0"),
		call("promote_delayed", "1", "e"),
		call("expire_lapsed_lease", "2", "f", "0"),
	}
	assert.Equal(t, [][]int{{0, 3}, {1}, {2, 5}, {4}}, pgUnits(ops))

	ops = nil
	for range postgres.MaxBatch + 3 {
		ops = append(ops, call("expire_lapsed_lease", "7", "x", "0"))
	}
	units := pgUnits(ops)
	require.Len(t, units, 2)
	assert.Len(t, units[0], postgres.MaxBatch)
	assert.Equal(t, []int{postgres.MaxBatch, postgres.MaxBatch + 1, postgres.MaxBatch + 2}, units[1])
}
