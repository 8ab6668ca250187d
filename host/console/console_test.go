package console

import (
	"context"
	"fmt"
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

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/shadow"
)

// source records what the console asks of the host; the host's own
// console is exercised end to end by the browser test (cmd/ffscan).
type source struct {
	status, history, explains, switches, canaries, resumes atomic.Int32
	lastSwitch, lastCanary                                 atomic.Value
	// canaryRefusal, if set, is the host's answer to every canary action.
	canaryRefusal string
}

func (s *source) Status() httpapi.StatusDoc {
	s.status.Add(1)
	b := int64(7)
	at := time.Unix(1700000000, 0)
	return httpapi.StatusDoc{Version: "t", Scanners: []httpapi.ScannerStatus{
		{Name: "lease_expiry", Enabled: true, State: "running", Plugin: "leaseexpiry", Backlog: &b, LastCycleAt: &at, Cycle: 3,
			ActionBudget: "20 per 1m0s", Paused: &httpapi.PauseStatus{Since: at, Reason: "action budget: acted on 24 items in 1m0s, over its budget of 20",
				Acted: 24, Examined: 30, Window: "1m0s", Max: 20}},
		{Name: "unblock", Enabled: false, State: "stopped", Plugin: "unblock"},
		{Name: "retention_trimmer", Enabled: true, State: "running", Plugin: "retention", Mode: "shadow", Swap: "canary",
			Shadow: &shadow.Snapshot{WouldAct: 9, ByCommand: map[string]uint64{"FCALL ff_purge_execution": 9},
				Latest: []shadow.Item{{At: at, Command: "FCALL ff_purge_execution", Keys: []string{"ff:exec:{fp:3}:aaaa:core"}, Args: 1, Values: []string{"3h"}}}},
			Canary: &canary.Status{State: canary.Comparing, From: canary.Version{SHA256: strings.Repeat("a", 64), Version: "1.0.0"},
				To: canary.Version{SHA256: strings.Repeat("b", 64), Version: "1.0.1"}, Cycles: 12, Clean: 0, WithDifference: 4,
				Items:  map[string]uint64{"same": 5, canary.OnlyNew: 3, canary.OnlyOld: 0, canary.Differ: 0},
				Latest: []canary.Diff{{At: at, Cycle: 12, Kind: canary.OnlyNew, Item: "{fp:3}:bbbb", New: []string{"FCALL ff_purge_execution {fp:3}:bbbb"}, Seen: 4}}}},
		{Name: "lease_expiry_old", Enabled: true, State: "running", Plugin: "leaseexpiry",
			Canary: &canary.Status{State: canary.Aborted, To: canary.Version{SHA256: strings.Repeat("c", 64)}, Cycles: 2, Reason: "aborted by console"}},
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
func (s *source) Canary(_ context.Context, name, action, _ string) (httpapi.CanaryResult, error) {
	s.canaries.Add(1)
	s.lastCanary.Store(name + " " + action)
	res := httpapi.CanaryResult{Scanner: name, Action: action, Error: s.canaryRefusal}
	if name == "nope" {
		return res, fmt.Errorf("%w: %q is not an enabled scanner of this host", httpapi.ErrNotFound, name)
	}
	if res.Error == "" {
		st := map[string]string{httpapi.CanaryStart: canary.Comparing, httpapi.CanaryPromote: canary.Promoted, httpapi.CanaryAbort: canary.Aborted}[action]
		res.Canary = &canary.Status{State: st, From: canary.Version{SHA256: strings.Repeat("a", 64)}, To: canary.Version{SHA256: strings.Repeat("b", 64), Version: "1.0.1"},
			Cycles: 12, Items: map[string]uint64{canary.OnlyNew: 3}}
	}
	return res, nil
}
func (s *source) Audit(_ context.Context, f audit.Filter) ([]audit.Entry, error) {
	at := time.Unix(1700000000, 0)
	all := []audit.Entry{
		{At: at, Kind: audit.KindOperator, Action: "mode shadow", Scanner: "lease_expiry", Channel: "console", Who: "token sha256:abcdef012345 from 127.0.0.1:5", Detail: "applied"},
		{At: at, Kind: audit.KindScanner, Scanner: "lease_expiry", Command: "FCALL ff_mark_lease_expired_if_due", Execution: "{fp:1}:x", Outcome: "acted", Digest: strings.Repeat("d", 64)},
	}
	var out []audit.Entry
	for _, e := range all {
		if (f.Kind == "" || e.Kind == f.Kind) && (f.Execution == "" || e.Execution == f.Execution) {
			out = append(out, e)
		}
	}
	return out, nil
}
func (s *source) SetScannerMode(_ context.Context, name, mode, _ string) (httpapi.ReloadResult, error) {
	s.switches.Add(1)
	s.lastSwitch.Store(name + " " + mode)
	return httpapi.ReloadResult{Started: []string{name}}, nil
}
func (s *source) ResumeScanner(_ context.Context, name, _ string) (httpapi.ResumeResult, error) {
	s.resumes.Add(1)
	if name == "nope" {
		return httpapi.ResumeResult{}, fmt.Errorf("%w: %q is not an enabled scanner of this host", httpapi.ErrNotFound, name)
	}
	if name != "lease_expiry" {
		return httpapi.ResumeResult{Scanner: name}, nil
	}
	return httpapi.ResumeResult{Scanner: name, Resumed: true, Pause: &httpapi.PauseStatus{Acted: 24, Window: "1m0s"}}, nil
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
	assert.Equal(t, int32(4), src.history.Load(), "one history read per scanner, in memory")
	assert.Zero(t, src.explains.Load())
	assert.Contains(t, body, `data-scanner="lease_expiry"`)
	assert.Contains(t, body, `<svg class="chart"`)
	assert.Contains(t, body, "3 of 4 running")
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

// A scanner in shadow shows a pill and a row of what it held back; one
// with a canary shows it beside it (versions, counts, the latest
// differences) with promote and abort; a canary that ended is one line.
func TestOverviewShowsShadowAndCanaries(t *testing.T) {
	code, body, _ := do(t, Handler(&source{}), httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464/", nil))
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `data-mode="shadow"`)
	assert.Contains(t, body, `<tr class="shadow" data-shadow="retention_trimmer">`)
	assert.Contains(t, body, "<b>9</b> writes held back <span class=\"dim\">by command: FCALL ff_purge_execution <b>9</b></span>")
	assert.Contains(t, body, "ff:exec:{fp:3}:aaaa:core")
	assert.NotContains(t, body, `data-shadow="lease_expiry"`, "a scanner without shadow writes has no shadow row")

	assert.Contains(t, body, `data-canary="retention_trimmer" data-canary-state="comparing"`)
	assert.Contains(t, body, "aaaaaaaaaaaa</code>")
	assert.Contains(t, body, "bbbbbbbbbbbb</code>")
	assert.Contains(t, body, `<b class="cycles">12</b> cycles compared`)
	assert.Contains(t, body, "only_new <b>3</b>")
	assert.Contains(t, body, `<tr data-kind="only_new">`)
	assert.Contains(t, body, "FCALL ff_purge_execution {fp:3}:bbbb")
	assert.Contains(t, body, "4 cycles")
	for _, a := range []string{"canary-promote", "canary-abort"} {
		assert.Equal(t, 1, strings.Count(body, `value="`+a+`"`), a)
	}
	// Start: offered for enabled scanners without an active canary.
	assert.Equal(t, 2, strings.Count(body, `value="canary-start"`))
	assert.Contains(t, body, `<tr class="canary ended" data-canary="lease_expiry_old" data-canary-state="aborted">`)
	assert.Contains(t, body, "canary aborted: sha256 <code")
	assert.Contains(t, body, "aborted by console")
}

func canaryAction(token, action, scanner string) *http.Request {
	form := url.Values{"action": {action}, "scanner": {scanner}, "token": {token}}
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:9464/actions", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "http://127.0.0.1:9464")
	return r
}

// The canary's buttons act as the others do: the admin token, then the
// host's Canary with its action, and a message of the outcome; a refusal
// the host explains is the message, shown as a refusal.
func TestCanaryActions(t *testing.T) {
	src := &source{}
	h := Handler(src)
	code, _, _ := do(t, h, canaryAction("", "canary-start", "retention_trimmer"))
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Zero(t, src.canaries.Load(), "no canary action without the token")

	for _, c := range []struct{ form, action, says string }{
		{"canary-start", httpapi.CanaryStart, "canary of retention_trimmer started: sha256 bbbbbbbbbbbb (1.0.1) runs in shadow beside sha256 aaaaaaaaaaaa; its decisions are compared below until you promote or abort it"},
		{"canary-promote", httpapi.CanaryPromote, "canary of retention_trimmer promoted: sha256 bbbbbbbbbbbb (1.0.1) serves now, after 12 cycles compared (3 items differed)"},
		{"canary-abort", httpapi.CanaryAbort, "canary of retention_trimmer aborted: sha256 bbbbbbbbbbbb (1.0.1) stopped after 12 cycles compared (3 items differed); the running version never changed"},
	} {
		code, _, hdr := do(t, h, canaryAction("sekrit", c.form, "retention_trimmer"))
		require.Equal(t, http.StatusSeeOther, code, c.form)
		assert.Equal(t, "retention_trimmer "+c.action, src.lastCanary.Load())
		loc, err := url.Parse(hdr.Get("Location"))
		require.NoError(t, err)
		assert.Equal(t, c.says, loc.Query().Get("msg"))
	}

	src.canaryRefusal = "canary request refused: scanner retention_trimmer already has a canary (sha256 bbbbbbbbbbbb); promote or abort it first"
	code, _, hdr := do(t, h, canaryAction("sekrit", "canary-start", "retention_trimmer"))
	require.Equal(t, http.StatusSeeOther, code)
	code, body, _ := do(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464"+hdr.Get("Location"), nil))
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<div class="msg bad" id="message">canary start of retention_trimmer refused: canary request refused: scanner retention_trimmer already has a canary`)

	code, body, _ = do(t, h, canaryAction("sekrit", "canary-abort", "nope"))
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, body, "canary abort of nope failed")
}

// A scanner paused at its action budget shows the pause and its figures,
// and a resume button that needs the token.
func TestPauseShownAndResumed(t *testing.T) {
	src := &source{}
	h := Handler(src)
	code, body, _ := do(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464/", nil))
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<span class="pill bad" data-paused="lease_expiry" title="action budget: acted on 24 items in 1m0s, over its budget of 20">paused: action budget</span>`)
	assert.Contains(t, body, `acted on <b>24</b> of <b>30</b> examined in 1m0s; budget 20; until an operator resumes it`)
	assert.Contains(t, body, `data-action="resume"`)
	assert.Equal(t, 1, strings.Count(body, `data-action="resume"`), "only the paused scanner has one")

	code, _, _ = do(t, h, canaryAction("", "resume", "lease_expiry"))
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Zero(t, src.resumes.Load())
	code, _, hdr := do(t, h, canaryAction("sekrit", "resume", "lease_expiry"))
	require.Equal(t, http.StatusSeeOther, code)
	loc, err := url.Parse(hdr.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, "scanner lease_expiry resumed: it acts again from its next cycle (it had paused after acting on 24 items in 1m0s)", loc.Query().Get("msg"))
	code, _, hdr = do(t, h, canaryAction("sekrit", "resume", "unblock"))
	require.Equal(t, http.StatusSeeOther, code)
	loc, _ = url.Parse(hdr.Get("Location"))
	assert.Equal(t, "scanner unblock was not paused", loc.Query().Get("msg"))
	code, _, _ = do(t, h, canaryAction("sekrit", "resume", "nope"))
	assert.Equal(t, http.StatusNotFound, code)
}

// An operator switches a scanner to shadow and back from the console.
func TestModeActions(t *testing.T) {
	src := &source{}
	h := Handler(src)
	code, body, _ := do(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464/", nil))
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `data-action="act"`, "the shadow scanner can be switched to act")
	assert.Contains(t, body, `data-action="shadow"`, "the others to shadow")
	code, _, _ = do(t, h, canaryAction("", "shadow", "lease_expiry"))
	assert.Equal(t, http.StatusUnauthorized, code)
	for _, c := range []struct{ mode, says string }{
		{"shadow", "scanner lease_expiry runs in shadow now: its writes are held back and recorded, not run (until the host restarts)"},
		{"act", "scanner lease_expiry acts now (until the host restarts)"},
	} {
		code, _, hdr := do(t, h, canaryAction("sekrit", c.mode, "lease_expiry"))
		require.Equal(t, http.StatusSeeOther, code)
		assert.Equal(t, "lease_expiry "+c.mode, src.lastSwitch.Load())
		loc, err := url.Parse(hdr.Get("Location"))
		require.NoError(t, err)
		assert.Equal(t, c.says, loc.Query().Get("msg"))
	}
}

// The activity page shows the trail, filtered.
func TestActivityPage(t *testing.T) {
	h := Handler(&source{})
	code, body, _ := do(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464/activity", nil))
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<td><b>mode shadow</b></td>`)
	assert.Contains(t, body, `<a href="/explain?id=%7bfp%3a1%7d%3ax">{fp:1}:x</a>`)
	assert.Contains(t, body, "token sha256:abcdef012345 from 127.0.0.1:5")
	code, body, _ = do(t, h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464/activity?kind=operator", nil))
	require.Equal(t, http.StatusOK, code)
	assert.NotContains(t, body, "ff_mark_lease_expired_if_due")
	assert.Contains(t, body, `<option value="operator" selected>`)
}
