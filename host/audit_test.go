package host

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/internal/proctest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// The audit trail: what a scanner did to an execution (its command, the
// plugin's digest, the outcome) and what operators did (through the
// CLI's client, the console, SIGHUP), each with its channel and the
// admin token's identity, read back with GET /v1/audit and shown by
// explain beside the verdicts.
func TestAuditTrailRecordsScannerAndOperatorActions(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{Plugin: "leaseexpiry", Interval: 200 * time.Millisecond})
	cfg.Scanners = map[string]config.Scanner{"lease_expiry": cfg.Scanners["hostwork"]}
	cfg.HTTP.Listen = proctest.FreeAddr(t)
	cfg.Watch.Plugins = false
	h, _ := running(t, cfg, func(h *Host) {
		h.SetConfigSource(ConfigSource{Load: func() (*config.Config, error) { c := *cfg; return &c, nil }})
	})
	st := func() httpapi.ScannerStatus { return h.Status().Scanners[0] }
	waitFor(t, h, time.Minute, "lease_expiry never ran", func() bool { return st().Cycle >= 1 })
	ctx := context.Background()
	tokPath, err := admintoken.Resolve(cfg.HTTP.AdminTokenFile)
	require.NoError(t, err)
	token, _, err := admintoken.Ensure(tokPath)
	require.NoError(t, err)

	// A scanner's action.
	id := leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: 7}, 50*time.Millisecond)
	waitFor(t, h, time.Minute, "the lease was never marked", func() bool { return ownership(c, id) == "lease_expired_reclaimable" })
	cl := httpapi.Client{Addr: cfg.HTTP.Listen, Token: token}
	var got []audit.Entry
	waitFor(t, h, time.Minute, "the action never reached the trail", func() bool {
		got, err = cl.Audit(url.Values{"execution": {id.String()}}, 10*time.Second)
		return err == nil && len(got) > 0
	})
	e := got[0]
	assert.Equal(t, audit.KindScanner, e.Kind)
	assert.Equal(t, "lease_expiry", e.Scanner)
	assert.Equal(t, "FCALL ff_mark_lease_expired_if_due", e.Command)
	assert.Equal(t, id.String(), e.Execution)
	assert.Equal(t, audit.Acted, e.Outcome)
	assert.Equal(t, st().SHA256[:audit.DigestShown], e.Digest)
	assert.NotEmpty(t, e.Host)

	// Operator actions: the CLI's client, the console, SIGHUP.
	var res httpapi.ReloadResult
	_, err = cl.Post("/v1/scanners/lease_expiry/shadow", time.Minute, &res)
	require.NoError(t, err)
	require.Empty(t, res.Error)
	console := func(action string) {
		t.Helper()
		form := url.Values{"token": {token}, "scanner": {"lease_expiry"}, "action": {action}}
		req, err := http.NewRequest(http.MethodPost, "http://"+cfg.HTTP.Listen+"/actions", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, action)
	}
	console("act")
	console("disable")
	console("enable")
	waitFor(t, h, time.Minute, "lease_expiry never came back", func() bool { return st().State == "running" })
	var swap httpapi.PluginSwapResult
	_, err = cl.Post("/v1/scanners/lease_expiry/reload?force=1", time.Minute, &swap)
	require.NoError(t, err)
	var resumed httpapi.ResumeResult
	_, err = cl.Post("/v1/scanners/lease_expiry/resume", time.Minute, &resumed)
	require.NoError(t, err)
	var can httpapi.CanaryResult
	_, err = cl.Post("/v1/scanners/lease_expiry/canary", time.Minute, &can)
	require.NoError(t, err)
	assert.Contains(t, can.Error, "holds the bytes that run now")
	_, err = h.ReloadConfig(audit.WithActor(ctx, audit.Actor{Channel: audit.ChannelSIGHUP}), "SIGHUP")
	require.NoError(t, err)

	var ops []audit.Entry
	waitFor(t, h, time.Minute, "the operator actions never reached the trail", func() bool {
		ops, err = cl.Audit(url.Values{"kind": {"operator"}}, 10*time.Second)
		return err == nil && len(ops) >= 8
	})
	recent, err := cl.Audit(url.Values{"kind": {"operator"}, "since": {"1h"}}, 10*time.Second)
	require.NoError(t, err)
	assert.Len(t, recent, len(ops), "all of them within the hour")
	byAction := map[string]audit.Entry{}
	for _, o := range ops {
		byAction[o.Action] = o
	}
	identity := audit.TokenIdentity(token)
	assert.Equal(t, audit.ChannelCLI, byAction["mode shadow"].Channel)
	assert.Contains(t, byAction["mode shadow"].Who, identity)
	assert.Equal(t, "lease_expiry", byAction["mode shadow"].Scanner)
	assert.Equal(t, audit.ChannelConsole, byAction["mode act"].Channel)
	assert.Contains(t, byAction["mode act"].Who, identity)
	assert.Equal(t, audit.ChannelSIGHUP, byAction["reload"].Channel)
	for action, channel := range map[string]string{"disable": audit.ChannelConsole, "enable": audit.ChannelConsole, "swap": audit.ChannelCLI,
		"resume": audit.ChannelCLI, "canary start": audit.ChannelCLI} {
		assert.Equal(t, channel, byAction[action].Channel, action)
		assert.Contains(t, byAction[action].Who, identity, action)
	}
	assert.Contains(t, byAction["canary start"].Detail, "refused: ")
	assert.Contains(t, byAction["resume"].Detail, "not paused")
	assert.Contains(t, byAction["swap"].Detail, "sha256")
	assert.NotContains(t, identity, token, "the token itself is never written")

	// Explain: what will happen, and what happened.
	rep, err := h.Explain(ctx, id.String())
	require.NoError(t, err)
	require.NotEmpty(t, rep.History)
	assert.Equal(t, "FCALL ff_mark_lease_expired_if_due", rep.History[0].Command)

	// The console's activity page shows both.
	page, err := http.Get("http://" + cfg.HTTP.Listen + "/activity?execution=" + url.QueryEscape(id.String()))
	require.NoError(t, err)
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	assert.Contains(t, string(body), "FCALL ff_mark_lease_expired_if_due")
	page, err = http.Get("http://" + cfg.HTTP.Listen + "/activity?kind=operator")
	require.NoError(t, err)
	body, _ = io.ReadAll(page.Body)
	page.Body.Close()
	assert.Contains(t, string(body), "<b>mode shadow</b>")
	assert.Contains(t, string(body), identity)

	// Bad queries are refused with the reason.
	_, err = cl.Audit(url.Values{"since": {"yesterday"}}, 10*time.Second)
	assert.ErrorContains(t, err, `since "yesterday"`)
	_, err = cl.Audit(url.Values{"execution": {"nope"}}, 10*time.Second)
	assert.Error(t, err)
}
