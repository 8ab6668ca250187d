package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/metrics"
)

// source records what the console asks of the host; the host's own
// console is exercised end to end by the browser test (cmd/ffscan).
type source struct {
	status, history, explains, switches atomic.Int32
	lastSwitch                          atomic.Value
}

func (s *source) Status() httpapi.StatusDoc {
	s.status.Add(1)
	b := int64(7)
	at := time.Unix(1700000000, 0)
	return httpapi.StatusDoc{Version: "t", Scanners: []httpapi.ScannerStatus{
		{Name: "lease_expiry", Enabled: true, State: "running", Plugin: "leaseexpiry", Backlog: &b, LastCycleAt: &at, Cycle: 3},
		{Name: "unblock", Enabled: false, State: "stopped", Plugin: "unblock"},
	}}
}
func (s *source) History(string) []metrics.Sample {
	s.history.Add(1)
	return []metrics.Sample{{Backlog: 3, Lag: time.Second}, {Backlog: -1}, {Backlog: 7, Lag: 2 * time.Second}}
}
func (s *source) Explain(context.Context, string) (*explain.Report, error) {
	s.explains.Add(1)
	return &explain.Report{ExecutionID: "{fp:1}:x", Scanners: []explain.Verdict{{Scanner: "lease_expiry", Verdict: "acts", Reason: "marked_expired"}}}, nil
}
func (s *source) AdminEnabled() bool          { return true }
func (s *source) AdminToken() (string, error) { return "sekrit", nil }
func (s *source) ReloadConfig(context.Context, string) (httpapi.ReloadResult, error) {
	return httpapi.ReloadResult{}, nil
}
func (s *source) ReloadPlugin(_ context.Context, name string, _, _ bool) (httpapi.PluginSwapResult, error) {
	return httpapi.PluginSwapResult{Scanner: name, Outcome: "swapped"}, nil
}
func (s *source) SetScannerEnabled(_ context.Context, name string, on bool, _ string) (httpapi.ReloadResult, error) {
	s.switches.Add(1)
	s.lastSwitch.Store(name + map[bool]string{true: " on", false: " off"}[on])
	return httpapi.ReloadResult{Stopped: []string{name}}, nil
}
func (s *source) ApprovePlugin(_ context.Context, name string, _ httpapi.ApprovalReview) (httpapi.PluginSwapResult, error) {
	return httpapi.PluginSwapResult{Scanner: name, Outcome: "approved"}, nil
}

func do(t *testing.T, h http.Handler, req *http.Request) (int, string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b), rec.Result().Header
}

// A page view asks the host for one status snapshot and the in-memory
// history, nothing else: it costs what GET /v1/status costs.
func TestOverviewCostsOneStatusCall(t *testing.T) {
	src := &source{}
	h := Handler(src)
	code, body, _ := do(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464/", nil))
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, int32(1), src.status.Load())
	assert.Equal(t, int32(2), src.history.Load(), "one history read per scanner, in memory")
	assert.Zero(t, src.explains.Load())
	assert.Contains(t, body, `data-scanner="lease_expiry"`)
	assert.Contains(t, body, `<svg class="chart"`)
	assert.Contains(t, body, "1 of 2 running")
}

// Pages follow the admin endpoints' Host rule (no DNS names but
// localhost), against DNS rebinding.
func TestPagesRefuseForeignHostNames(t *testing.T) {
	h := Handler(&source{})
	for _, path := range []string{"/", "/explain?id=x"} {
		code, _, _ := do(t, h, httptest.NewRequest(http.MethodGet, "http://evil.example"+path, nil))
		assert.Equal(t, http.StatusForbidden, code, path)
	}
	code, _, _ := do(t, h, httptest.NewRequest(http.MethodGet, "http://localhost:9464/", nil))
	assert.Equal(t, http.StatusOK, code)
}

func action(token string, mutate func(*http.Request)) *http.Request {
	form := url.Values{"action": {"disable"}, "scanner": {"lease_expiry"}}
	if token != "" {
		form.Set("token", token)
	}
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:9464/actions", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if mutate != nil {
		mutate(r)
	}
	return r
}

// An action needs the admin token in the form: without it, with a wrong
// one, or sent from another site, nothing runs.
func TestActionsNeedTheTokenAndTheSameOrigin(t *testing.T) {
	src := &source{}
	h := Handler(src)
	code, body, _ := do(t, h, action("", nil))
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Contains(t, body, "needs the admin token")
	code, _, _ = do(t, h, action("wrong", nil))
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _, _ = do(t, h, action("sekrit", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }))
	assert.Equal(t, http.StatusForbidden, code)
	code, _, _ = do(t, h, action("sekrit", func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }))
	assert.Equal(t, http.StatusForbidden, code)
	code, _, _ = do(t, h, action("", func(r *http.Request) { r.Header.Set("Cookie", "token=sekrit") }))
	assert.Equal(t, http.StatusUnauthorized, code, "a cookie is not a token")
	assert.Zero(t, src.switches.Load(), "no refused action ran")

	code, _, hdr := do(t, h, action("sekrit", func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1:9464") }))
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, int32(1), src.switches.Load())
	assert.Equal(t, "lease_expiry off", src.lastSwitch.Load())
	assert.Contains(t, hdr.Get("Location"), "disabled")
}

func TestExplainPage(t *testing.T) {
	src := &source{}
	code, body, _ := do(t, Handler(src), httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464/explain?id=%7Bfp:1%7D:x", nil))
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, int32(1), src.explains.Load())
	assert.Contains(t, body, `data-verdict="acts"`)
	assert.Contains(t, body, "marked_expired")
}
