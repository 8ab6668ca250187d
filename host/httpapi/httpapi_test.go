package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fakeSource struct{ ready error }

func (f fakeSource) Status() StatusDoc {
	return StatusDoc{Version: "v", Scanners: []ScannerStatus{{Name: "a", Enabled: true, State: "broken", LastError: "launch: sha256 mismatch"}}}
}
func (f fakeSource) Ready(context.Context) error { return f.ready }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9464"+path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ffscan_test_total", Help: "t"})
	reg.MustRegister(c)
	c.Inc()

	h := Handler(reg, fakeSource{})
	code, body := get(t, h, "/healthz")
	assert.Equal(t, 200, code, body)
	code, body = get(t, h, "/readyz")
	assert.Equal(t, 200, code, body)
	code, body = get(t, h, "/metrics")
	assert.Equal(t, 200, code)
	assert.Contains(t, body, "ffscan_test_total 1")
	code, body = get(t, h, "/v1/status")
	assert.Equal(t, 200, code)
	var doc StatusDoc
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	assert.Equal(t, "broken", doc.Scanners[0].State)
	assert.Nil(t, doc.Scanners[0].Backlog, "unknown backlog is null, not 0")

	notReady := Handler(reg, fakeSource{ready: errors.New("scanner a is broken")})
	code, body = get(t, notReady, "/readyz")
	assert.Equal(t, 503, code)
	assert.Contains(t, body, "scanner a is broken")
	code, _ = get(t, notReady, "/healthz")
	assert.Equal(t, 200, code, "liveness does not depend on readiness")
}

// /v1 answers requests addressed to an IP address or localhost, and
// refuses other names (DNS rebinding: a page whose own name resolves to
// 127.0.0.1); the plain probes stay open.
func TestV1RefusesForeignHostNames(t *testing.T) {
	h := Handler(prometheus.NewRegistry(), &fakeAdmin{})
	do := func(method, target string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, target, nil)
		req.Header.Set("Authorization", "Bearer "+fakeToken)
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, target := range []string{"http://127.0.0.1:9464", "http://localhost:9464", "http://[::1]:9464", "http://10.0.0.7:9464"} {
		assert.Equal(t, http.StatusOK, do(http.MethodGet, target+"/v1/status"), target)
	}
	assert.Equal(t, http.StatusForbidden, do(http.MethodGet, "http://attacker.example:9464/v1/status"))
	assert.Equal(t, http.StatusForbidden, do(http.MethodPost, "http://attacker.example:9464/v1/reload"))
	assert.Equal(t, http.StatusOK, do(http.MethodPost, "http://127.0.0.1:9464/v1/reload"))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "http://attacker.example:9464/healthz"), "probes stay open")
}

// fakeAdmin is a source that accepts admin actions.
type fakeAdmin struct{ fakeSource }

const fakeToken = "0123456789abcdef0123456789abcdef"

func (*fakeAdmin) AdminEnabled() bool          { return true }
func (*fakeAdmin) AdminToken() (string, error) { return fakeToken, nil }
func (*fakeAdmin) ReloadConfig(context.Context, string) (ReloadResult, error) {
	return ReloadResult{}, nil
}
func (*fakeAdmin) ReloadPlugin(_ context.Context, name string, _, _ bool) (PluginSwapResult, error) {
	return PluginSwapResult{Scanner: name, Outcome: "unchanged"}, nil
}

// Admin actions need the host's token: none, a wrong one or a malformed
// header is 401; the right one passes; a token the host cannot read
// refuses everything (503).
func TestAdminNeedsTheToken(t *testing.T) {
	post := func(src Source, auth string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:9464/v1/reload", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		Handler(prometheus.NewRegistry(), src).ServeHTTP(rec, req)
		return rec.Code
	}
	ok := &fakeAdmin{}
	assert.Equal(t, http.StatusUnauthorized, post(ok, ""))
	assert.Equal(t, http.StatusUnauthorized, post(ok, "Bearer "+fakeToken[:31]+"0"))
	assert.Equal(t, http.StatusUnauthorized, post(ok, fakeToken), "the Bearer scheme is required")
	assert.Equal(t, http.StatusOK, post(ok, "Bearer "+fakeToken))
	assert.Equal(t, http.StatusServiceUnavailable, post(&brokenToken{}, "Bearer "+fakeToken))
}

type brokenToken struct{ fakeAdmin }

func (*brokenToken) AdminToken() (string, error) {
	return "", errors.New("admin token: /x has mode 0644: others may read it")
}
