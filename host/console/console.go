// Package console is the host's web console: server-rendered pages on the
// host's HTTP listener (no build chain, a few lines of hand-written script)
// that show what `ffscan status` shows, a small chart of each scanner's
// recent backlog and lag, the explain form, and the operator's actions.
//
// Cost: a page is rendered from one status snapshot (the same call as
// GET /v1/status) and the in-memory history of the scanners' cycles; it
// reads nothing else. The explain page asks the scanners, as
// GET /v1/explain does.
//
// Safety: every page answers only requests addressed to an IP address or
// localhost (the admin endpoints' DNS-rebinding rule). An action (enable,
// disable, hot-swap, approve, start, promote or abort a canary) is a form POST that carries the admin token
// in a form field: a page of another site can make a browser send the
// POST, but cannot know the token, and nothing is kept in a cookie. An
// action whose Origin or Sec-Fetch-Site says another site sent it is
// refused before the token is even compared.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/metrics"
	"github.com/ffscan/ffscan/host/shadow"
)

// Source is what the console reads and acts on (the host implements it).
type Source interface {
	Status() httpapi.StatusDoc
	History(scanner string) []metrics.Sample
	Explain(ctx context.Context, id string) (*explain.Report, error)
	httpapi.Admin
	httpapi.Switches
	// Canary starts, promotes or aborts scanner name's canary
	// (httpapi.Canaries).
	Canary(ctx context.Context, name, action, who string) (httpapi.CanaryResult, error)
	// ResumeScanner resumes a scanner paused at its action budget
	// (httpapi.Resumer).
	ResumeScanner(ctx context.Context, name, who string) (httpapi.ResumeResult, error)
	// Audit reads the audit trail (httpapi.Auditor).
	Audit(ctx context.Context, f audit.Filter) ([]audit.Entry, error)
}

// activityView is the activity page: the trail, as filtered.
type activityView struct {
	Filter  audit.Filter
	Entries []audit.Entry
	Error   string
}

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"short":   short,
	"clip":    clip,
	"ago":     ago,
	"join":    strings.Join,
	"chart":   chart,
	"verdict": verdictClass,
	"deref":   func(p *int64) int64 { return *p },
	"ms":      func(t *time.Time) string { return t.UTC().Format("15:04:05.000") },
}).ParseFS(templateFS, "templates/*.html"))

// refreshMs is how often the overview reloads itself while nobody types.
const refreshMs = 5000

// activityShown is how many entries the activity page shows.
const activityShown = 200

// explainTimeout bounds the explain page's questions to the scanners.
const explainTimeout = 10 * time.Second

// Handler serves the console: GET / (the overview), GET /explain?id=
// (the explain form and report), POST /actions (the operator's actions).
func Handler(src Source) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if !httpapi.HostAllowed(w, r) {
			return
		}
		render(w, "overview.html", overview(src.Status(), src.History, r.URL.Query()))
	})
	mux.HandleFunc("GET /explain", func(w http.ResponseWriter, r *http.Request) {
		if !httpapi.HostAllowed(w, r) {
			return
		}
		id := strings.TrimSpace(r.URL.Query().Get("id"))
		v := explainView{ID: id}
		if id != "" {
			ctx, cancel := context.WithTimeout(r.Context(), explainTimeout)
			defer cancel()
			rep, err := src.Explain(ctx, id)
			if err != nil {
				v.Error = err.Error()
			} else {
				v.Report = rep
				v.Now = time.UnixMilli(rep.NowMs)
			}
		}
		render(w, "explain.html", v)
	})
	mux.HandleFunc("GET /activity", func(w http.ResponseWriter, r *http.Request) {
		if !httpapi.HostAllowed(w, r) {
			return
		}
		q := r.URL.Query()
		v := activityView{Filter: audit.Filter{Execution: strings.TrimSpace(q.Get("execution")), Scanner: strings.TrimSpace(q.Get("scanner")), Kind: q.Get("kind"), Limit: activityShown}}
		ctx, cancel := context.WithTimeout(r.Context(), explainTimeout)
		defer cancel()
		entries, err := src.Audit(ctx, v.Filter)
		if err != nil {
			v.Error = err.Error()
		}
		v.Entries = entries
		render(w, "activity.html", v)
	})
	mux.HandleFunc("POST /actions", func(w http.ResponseWriter, r *http.Request) {
		if !httpapi.HostAllowed(w, r) {
			return
		}
		msg, code := act(w, r, src)
		if code != http.StatusOK {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(code)
			render(w, "refused.html", msg)
			return
		}
		http.Redirect(w, r, "/?msg="+url.QueryEscape(msg), http.StatusSeeOther)
	})
	return mux
}

// act runs one action of the form and says what happened, with the HTTP
// status: 200 done (or done with a refusal the host explains), 403/401
// refused before anything ran.
func act(w http.ResponseWriter, r *http.Request, src Source) (string, int) {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return "refused: the request came from another site (Sec-Fetch-Site: " + site + ")", http.StatusForbidden
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return "refused: the request came from another origin (" + o + ")", http.StatusForbidden
		}
	}
	if err := r.ParseForm(); err != nil {
		return "refused: " + err.Error(), http.StatusBadRequest
	}
	if !src.AdminEnabled() {
		return "refused: admin actions are disabled (http.admin: false)", http.StatusForbidden
	}
	want, err := src.AdminToken()
	if err != nil {
		return "refused: the host cannot read its admin token: " + err.Error(), http.StatusServiceUnavailable
	}
	got := strings.TrimSpace(r.PostForm.Get("token"))
	if got == "" {
		return "refused: this action needs the admin token (the file http.admin_token_file names; `cat ~/.config/ffscan/admin-token`)", http.StatusUnauthorized
	}
	if !admintoken.Equal(got, want) {
		return "refused: that is not the host's admin token", http.StatusUnauthorized
	}
	// Actions wait for plugins (a relaunch): past the server's write
	// timeout, for the token's holder only.
	httpapi.LiftWriteDeadline(w)
	name := r.PostForm.Get("scanner")
	who := "console (" + r.RemoteAddr + ")"
	ctx := audit.WithActor(r.Context(), audit.Actor{Channel: audit.ChannelConsole, Who: audit.TokenIdentity(got) + " from " + r.RemoteAddr})
	switch a := r.PostForm.Get("action"); a {
	case "enable", "disable":
		res, err := src.SetScannerEnabled(ctx, name, a == "enable", who)
		switch {
		case err != nil:
			return fmt.Sprintf("%s %s failed: %v", a, name, err), codeOf(err)
		case res.Error != "":
			return fmt.Sprintf("%s %s refused: %s", a, name, res.Error), http.StatusOK
		}
		return fmt.Sprintf("scanner %s %sd (until the host restarts; %s)", name, a, strings.Join(append(res.Started, res.Stopped...), ", ")), http.StatusOK
	case "reload":
		res, err := src.ReloadPlugin(ctx, name, true, false)
		return swapMsg("hot swap", name, res, err)
	case "approve":
		// The console approves exactly the declaration it showed: the
		// binary and policy digest travel with the form.
		rv := httpapi.ApprovalReview{SHA256: r.PostForm.Get("sha256"), Policy: r.PostForm.Get("policy")}
		if rv.SHA256 == "" || rv.Policy == "" {
			return fmt.Sprintf("approve of %s refused: the form names no reviewed binary and policy", name), http.StatusBadRequest
		}
		res, err := src.ApprovePlugin(ctx, name, rv)
		return swapMsg("approve", name, res, err)
	case "canary-start", "canary-promote", "canary-abort":
		action := map[string]string{"canary-start": httpapi.CanaryStart, "canary-promote": httpapi.CanaryPromote, "canary-abort": httpapi.CanaryAbort}[a]
		res, err := src.Canary(ctx, name, action, who)
		return canaryMsg(action, name, res, err)
	case "shadow", "act":
		res, err := src.SetScannerMode(ctx, name, a, who)
		switch {
		case err != nil:
			return fmt.Sprintf("mode %s for %s failed: %v", a, name, err), codeOf(err)
		case res.Error != "":
			return fmt.Sprintf("mode %s for %s refused: %s", a, name, res.Error), http.StatusOK
		case a == "shadow":
			return fmt.Sprintf("scanner %s runs in shadow now: its writes are held back and recorded, not run (until the host restarts)", name), http.StatusOK
		}
		return fmt.Sprintf("scanner %s acts now (until the host restarts)", name), http.StatusOK
	case "resume":
		res, err := src.ResumeScanner(ctx, name, who)
		switch {
		case err != nil:
			return fmt.Sprintf("resume of %s failed: %v", name, err), codeOf(err)
		case !res.Resumed:
			return fmt.Sprintf("scanner %s was not paused", name), http.StatusOK
		}
		return fmt.Sprintf("scanner %s resumed: it acts again from its next cycle (it had paused after acting on %d items in %s)", name, res.Pause.Acted, res.Pause.Window), http.StatusOK
	default:
		return fmt.Sprintf("unknown action %q", a), http.StatusBadRequest
	}
}

func swapMsg(what, name string, res httpapi.PluginSwapResult, err error) (string, int) {
	if err != nil {
		return fmt.Sprintf("%s of %s failed: %v", what, name, err), codeOf(err)
	}
	if res.Error != "" {
		return fmt.Sprintf("%s of %s: %s: %s", what, name, res.Outcome, res.Error), http.StatusOK
	}
	return fmt.Sprintf("%s of %s: %s (pid %d)", what, name, res.Outcome, res.Pid), http.StatusOK
}

// canaryMsg says what a canary action did: started beside the running
// version, promoted (a hot swap to the bytes compared), or aborted (the
// running version untouched); a refusal the host explains is shown as
// the message, as the other actions' are.
func canaryMsg(action, name string, res httpapi.CanaryResult, err error) (string, int) {
	if err != nil {
		return fmt.Sprintf("canary %s of %s failed: %v", action, name, err), codeOf(err)
	}
	if res.Error != "" {
		return fmt.Sprintf("canary %s of %s refused: %s", action, name, res.Error), http.StatusOK
	}
	cs := res.Canary
	if cs == nil {
		return fmt.Sprintf("canary %s of %s: done", action, name), http.StatusOK
	}
	to := "sha256 " + short(cs.To.SHA256)
	if cs.To.Version != "" {
		to += " (" + cs.To.Version + ")"
	}
	switch action {
	case httpapi.CanaryStart:
		return fmt.Sprintf("canary of %s started: %s runs in shadow beside sha256 %s; its decisions are compared below until you promote or abort it",
			name, to, short(cs.From.SHA256)), http.StatusOK
	case httpapi.CanaryPromote:
		return fmt.Sprintf("canary of %s %s: %s serves now, after %d cycles compared (%d items differed)",
			name, cs.State, to, cs.Cycles, cs.Differences()), http.StatusOK
	default:
		return fmt.Sprintf("canary of %s %s: %s stopped after %d cycles compared (%d items differed); the running version never changed",
			name, cs.State, to, cs.Cycles, cs.Differences()), http.StatusOK
	}
}

func codeOf(err error) int {
	switch {
	case errors.Is(err, httpapi.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, httpapi.ErrBadRequest):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func render(w http.ResponseWriter, page string, data any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'; form-action 'self'")
	if err := pages.ExecuteTemplate(w, page, data); err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusInternalServerError)
	}
}

// overviewView is the overview page's data.
type overviewView struct {
	Doc      httpapi.StatusDoc
	Scanners []scannerView
	Plugins  []pluginView
	Running  int
	Message  string
	// MessageBad: the message reports a refusal or a failure.
	MessageBad bool
	// Refresh is the page's reload period in ms (0: none; ?refresh=0).
	Refresh int
}

type scannerView struct {
	httpapi.ScannerStatus
	History []metrics.Sample
	// ShadowLatest are the latest writes the scanner held back (shadow
	// mode), CanaryLatest its canary's latest differences: the few the
	// page shows.
	ShadowLatest []shadow.Item
	CanaryLatest []canary.Diff
}

// CanaryActive says a canary runs beside the scanner (comparing or being
// promoted).
func (s scannerView) CanaryActive() bool { return s.Canary != nil && s.Canary.Active() }

// How many held-back writes and canary differences a scanner's rows show.
const (
	shadowShown = 5
	canaryShown = 10
)

type pluginView struct {
	Binary, Path, SHA256, Version, Isolation, Policy string
	APIVersion                                       int
	Scanners                                         []string
	Pending                                          []string
}

func overview(doc httpapi.StatusDoc, hist func(string) []metrics.Sample, q url.Values) overviewView {
	v := overviewView{Doc: doc, Message: q.Get("msg")}
	v.MessageBad = strings.Contains(v.Message, "refused") || strings.Contains(v.Message, "failed")
	v.Refresh = refreshMs
	if q.Get("refresh") == "0" {
		v.Refresh = 0
	}
	byBinary := map[string]*pluginView{}
	for _, s := range doc.Scanners {
		sv := scannerView{ScannerStatus: s, History: hist(s.Name)}
		if s.Shadow != nil {
			sv.ShadowLatest = s.Shadow.Latest[:min(len(s.Shadow.Latest), shadowShown)]
		}
		if s.Canary != nil {
			sv.CanaryLatest = s.Canary.Latest[:min(len(s.Canary.Latest), canaryShown)]
		}
		v.Scanners = append(v.Scanners, sv)
		if s.State == "running" {
			v.Running++
		}
		bin := s.Plugin
		if bin == "" {
			continue
		}
		p := byBinary[bin]
		if p == nil {
			p = &pluginView{Binary: bin}
			byBinary[bin] = p
		}
		if s.SHA256 != "" {
			p.Path, p.SHA256, p.Version, p.Isolation, p.Policy, p.APIVersion = s.Path, s.SHA256, s.Version, s.Isolation, s.Policy, s.APIVersion
		}
		p.Scanners = append(p.Scanners, s.Name)
		if s.PendingApproval {
			p.Pending = append(p.Pending, s.Name)
		}
	}
	for _, p := range byBinary {
		v.Plugins = append(v.Plugins, *p)
	}
	sort.Slice(v.Plugins, func(i, j int) bool { return v.Plugins[i].Binary < v.Plugins[j].Binary })
	return v
}

// explainView is the explain page's data.
type explainView struct {
	ID     string
	Report *explain.Report
	Now    time.Time
	Error  string
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// clip shortens s to n characters, with an ellipsis.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	return t.UTC().Format("15:04:05")
}

func verdictClass(v string) string {
	switch v {
	case "acts":
		return "ok"
	case "waits":
		return "info"
	case "skips", "not_owned", "lane_not_scanned":
		return "warn"
	case "not_running", "failed":
		return "bad"
	}
	return "dim"
}

// chart draws a scanner's recent cycles as an inline SVG: its backlog
// (blue) and lag (orange), each scaled to its own maximum.
func chart(hist []metrics.Sample) template.HTML {
	const w, h = 160.0, 34.0
	if len(hist) < 2 {
		return template.HTML(`<svg class="chart" width="160" height="34" role="img" aria-label="no cycles yet"><text x="4" y="20" class="dim">no cycles yet</text></svg>`)
	}
	var maxB, maxL float64
	for _, s := range hist {
		maxB = math.Max(maxB, float64(s.Backlog))
		maxL = math.Max(maxL, s.Lag.Seconds())
	}
	line := func(val func(metrics.Sample) (float64, bool), top float64) string {
		var b strings.Builder
		step := w / float64(metrics.HistoryLen-1)
		x0 := w - step*float64(len(hist)-1)
		pen := "M"
		for i, s := range hist {
			y, ok := val(s)
			if !ok {
				pen = "M"
				continue
			}
			if top > 0 {
				y = h - 2 - (h-4)*y/top
			} else {
				y = h - 2
			}
			fmt.Fprintf(&b, "%s%.1f %.1f ", pen, x0+step*float64(i), y)
			pen = "L"
		}
		return b.String()
	}
	last := hist[len(hist)-1]
	backlog := "unknown"
	if last.Backlog >= 0 {
		backlog = strconv.FormatInt(last.Backlog, 10)
	}
	title := fmt.Sprintf("last %d cycles: backlog now %s (max %.0f), lag now %s (max %s)", len(hist), backlog, maxB,
		last.Lag.Round(time.Millisecond), (time.Duration(maxL * float64(time.Second))).Round(time.Millisecond))
	return template.HTML(fmt.Sprintf(`<svg class="chart" width="160" height="34" viewBox="0 0 160 34" role="img"><title>%s</title>`+
		`<path d="%s" class="backlog"/><path d="%s" class="lag"/></svg>`,
		template.HTMLEscapeString(title),
		line(func(s metrics.Sample) (float64, bool) { return float64(s.Backlog), s.Backlog >= 0 }, maxB),
		line(func(s metrics.Sample) (float64, bool) { return s.Lag.Seconds(), true }, maxL)))
}
