package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/internal/testenv"
)

// status and reload need only the running host's address: a mistake
// elsewhere in the file does not stop them, and reload is how the host
// gets to refuse the file and say why.
func TestClientCommandsWorkWithABrokenFile(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
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
