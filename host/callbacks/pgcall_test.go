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
}
