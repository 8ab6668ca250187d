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
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
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
