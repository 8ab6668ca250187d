package host

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
)

// The audit trail of a Postgres-only host is kept in Postgres
// (ffscan.audit_entry): pg_lease_expiry's release of a lapsed lease
// planted while the host runs is found by the execution's id, by the
// scanner and by kind, with the PGCALL, the plugin's digest and the
// outcome; an operator's disable and enable through the HTTP API (the
// CLI's client, the admin token) are found by kind, scanner and since,
// with their channel and the token's identity; explain shows the
// execution's history. A read-only host on the same database keeps no
// trail.
func TestPostgresOnlyHostKeepsItsAuditTrailInPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const (
		leases = pgreconcilers.LeaseExpiryName
		delays = pgreconcilers.DelayedPromoterName
		pk     = 5
		uuid   = "a0d17000-0000-4000-8000-000000000001"
		id     = "{fp:5}:" + uuid
	)
	h, cfg, db := pgReconcilerHost(t, pgScanner(), pgScanner(), func(c *config.Config) {
		c.HTTP.Listen = proctest.FreeAddr(t)
		c.Watch.Plugins = false
	})
	require.NotNil(t, h.Status().Audit)
	assert.Equal(t, "postgres", h.Status().Audit.Store)
	tokPath, err := admintoken.Resolve(cfg.HTTP.AdminTokenFile)
	require.NoError(t, err)
	token, _, err := admintoken.Ensure(tokPath)
	require.NoError(t, err)
	cl := httpapi.Client{Addr: cfg.HTTP.Listen, Token: token}

	// A lapsed lease on a terminal execution: pg_lease_expiry releases
	// it (release_stale_lease).
	plantStaleLease(t, db, pk, uuid)
	var got []audit.Entry
	waitFor(t, h, time.Minute, "the release never reached the trail", func() bool {
		got, err = cl.Audit(url.Values{"execution": {id}}, 10*time.Second)
		return err == nil && len(got) > 0
	})
	require.Len(t, got, 1, "released once")
	e := got[0]
	assert.Equal(t, audit.KindScanner, e.Kind)
	assert.Equal(t, leases, e.Scanner)
	assert.Equal(t, "PGCALL release_stale_lease", e.Command)
	assert.Equal(t, id, e.Execution)
	assert.Equal(t, audit.Acted, e.Outcome)
	assert.Equal(t, statusOf(h, leases).SHA256[:audit.DigestShown], e.Digest)
	assert.NotEmpty(t, e.Host)
	assert.Empty(t, e.Channel, "a scanner's action has no channel")
	var rows int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM "+audit.Table+" WHERE execution = $1 AND scanner = $2", id, leases).Scan(&rows))
	assert.Equal(t, 1, rows, "kept in the database")
	byScanner, err := cl.Audit(url.Values{"scanner": {leases}, "kind": {"scanner"}}, 10*time.Second)
	require.NoError(t, err)
	require.NotEmpty(t, byScanner)
	assert.Equal(t, id, byScanner[0].Execution)

	// Operator actions through the HTTP API.
	for _, action := range []string{"disable", "enable"} {
		var res httpapi.ReloadResult
		_, err = cl.Post("/v1/scanners/"+leases+"/"+action, time.Minute, &res)
		require.NoError(t, err, action)
		require.Empty(t, res.Error, action)
	}
	waitFor(t, h, time.Minute, "pg_lease_expiry never came back", func() bool { return statusOf(h, leases).State == "running" })
	var ops []audit.Entry
	waitFor(t, h, time.Minute, "the operator actions never reached the trail", func() bool {
		ops, err = cl.Audit(url.Values{"kind": {"operator"}, "scanner": {leases}, "since": {"1h"}}, 10*time.Second)
		return err == nil && len(ops) >= 2
	})
	require.Len(t, ops, 2)
	assert.Equal(t, "enable", ops[0].Action, "newest first")
	assert.Equal(t, "disable", ops[1].Action)
	for _, o := range ops {
		assert.Equal(t, audit.ChannelCLI, o.Channel, o.Action)
		assert.Contains(t, o.Who, audit.TokenIdentity(token), o.Action)
		assert.Equal(t, leases, o.Scanner, o.Action)
		assert.Contains(t, o.Detail, "applied", o.Action)
		assert.WithinDuration(t, time.Now(), o.At, time.Hour)
	}
	none, err := cl.Audit(url.Values{"kind": {"operator"}, "scanner": {delays}}, 10*time.Second)
	require.NoError(t, err)
	assert.Empty(t, none, "nothing was done to the other scanner")
	all, err := cl.Audit(url.Values{"since": {"1h"}}, 10*time.Second)
	require.NoError(t, err)
	assert.Len(t, all, 3, "the release and the two operator actions")

	// Explain: what happened to the execution.
	rep, err := h.Explain(ctx, id)
	require.NoError(t, err)
	assert.Empty(t, rep.HistoryError)
	require.Len(t, rep.History, 1)
	assert.Equal(t, "PGCALL release_stale_lease", rep.History[0].Command)
	assert.Equal(t, leases, rep.History[0].Scanner)

	// A read-only host keeps no trail.
	ro, err := BootReadOnly(ctx, cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
	require.NoError(t, err)
	defer ro.Close()
	assert.Nil(t, ro.audit)
	_, err = ro.Audit(ctx, audit.Filter{})
	assert.ErrorContains(t, err, "keeps no audit trail")
}
