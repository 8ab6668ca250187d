package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// status and reload need only the running host's address: a mistake
// elsewhere in the file does not stop them, and reload is how the host
// gets to refuse the file and say why.
func TestClientCommandsWorkWithABrokenFile(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	body := "partitions: {flow: 16}\nwatch: {config: false}\nscanners:\n  hostwork: {interval: 100ms}\n"
	hp := startHost(t, body, "--valkey-addr", srv.Addr)
	cfgPath := hp.cmd.Args[3]
	// The host listens where --http-listen said; the file says the same,
	// as an operator's would.
	body = "http: {listen: \"" + hp.addr + "\"}\n" + body
	require.NoError(t, os.WriteFile(cfgPath, []byte(body), 0o600))

	code, out := ffscan(t, "status", "--config", cfgPath)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "generation 1, 0 reload(s), 0 refused")

	require.NoError(t, os.WriteFile(cfgPath, []byte(body+"  hostwrok: {intervall: 1s}\n"), 0o600))
	code, out = ffscan(t, "status", "--config", cfgPath)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "hostwork")

	code, out = ffscan(t, "reload", "--config", cfgPath)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "configuration reload refused")
	assert.Contains(t, out, "scanners.hostwrok.intervall: unknown key")

	code, out = ffscan(t, "status", "--config", cfgPath)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "generation 1, 0 reload(s), 1 refused; last refusal at ")
	assert.Contains(t, out, "scanners.hostwrok.intervall: unknown key")

	// A file that is not YAML at all gives no address: say so, and how
	// to get on.
	require.NoError(t, os.WriteFile(cfgPath, []byte("scanners: [\n"), 0o600))
	code, out = ffscan(t, "status", "--config", cfgPath)
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, out, "pass --addr host:port")
}

// The compact view fits 100 columns, computes rates from two samples,
// and ends with its legend.
func TestCompactStatus(t *testing.T) {
	t.Parallel()
	backlog := int64(12)
	at := time.Date(2026, 11, 25, 14, 3, 7, 0, time.UTC)
	doc := func(processed int64) httpapi.StatusDoc {
		return httpapi.StatusDoc{
			Version: "1.0.0", Config: httpapi.ConfigStatus{Generation: 2, Refused: 1},
			Completions: &httpapi.CompletionsStatus{Messages: 40, Resolved: 38},
			Scanners: []httpapi.ScannerStatus{
				{Name: "dependency_reconciler", Enabled: true, State: "running", Cycle: 120, Processed: processed, Errors: 2, Backlog: &backlog, LastCycleDuration: "3.456789ms"},
				{Name: "budget_reset", Enabled: false, State: "stopped"},
				{Name: "a_scanner_with_a_name_longer_than_the_column", Enabled: true, State: "restarting", NotApplied: strings.Repeat("options refused ", 20)},
			},
		}
	}
	var b strings.Builder
	prev := &sample{at: at, doc: doc(100)}
	printCompact(&b, prev, &sample{at: at.Add(4 * time.Second), doc: doc(150)})
	out := b.String()
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		assert.LessOrEqual(t, len(l), 100, l)
	}
	assert.Contains(t, out, "-- 14:03:11")
	assert.Contains(t, out, "config generation 2 (1 refused)  completions: 40 msgs, 38 edges")
	assert.Regexp(t, `dependency_reconciler\s+running\s+120\s+12\.5\s+150\s+2\s+12\s+3\.5ms`, out)
	assert.Regexp(t, `budget_reset\s+disabled\s+0\s+-`, out)
	assert.Contains(t, out, "a_scanner_with_a_name~ restarting")
	assert.Contains(t, out, "  NOT APPLIED: options refused")
	assert.True(t, strings.HasSuffix(out, watchLegend+"\n"))

	// The first sample has no rate yet.
	b.Reset()
	printCompact(&b, nil, prev)
	assert.Regexp(t, `dependency_reconciler\s+running\s+120\s+-\s+100`, b.String())
}
