package host

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/libwatch"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// lockedBuffer is a log sink safe for the host's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A server that lost the library (restarted without persistence) gets it
// back from a running host, even an idle one that calls no function, and
// the host says so; producers would otherwise fail with "function not
// found" until the host's own next FCALL.
func TestLostLibraryIsReloaded(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.Scanners = nil // idle: no scanner, so no FCALL of its own
	logs := &lockedBuffer{}
	h, err := Boot(context.Background(), cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: logs}))
	require.NoError(t, err)
	h.library.TestSignals.Checked.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); assert.NoError(t, h.Run(ctx)) }()
	t.Cleanup(func() { cancel(); <-done; h.Close() })

	fcallVersion := func() error {
		return c.Do(context.Background(), c.B().Fcall().Function("ff_version").Numkeys(0).Build()).Error()
	}
	require.NoError(t, fcallVersion())
	require.NoError(t, c.Do(context.Background(), c.B().FunctionFlush().Build()).Error())
	require.True(t, lua.IsFunctionNotFound(fcallVersion()), "the server lost the library")

	// The host's periodic check (every libwatch.DefaultInterval) loads it
	// again and says so.
	wctx, wcancel := context.WithTimeout(ctx, 3*libwatch.DefaultInterval+20*time.Second)
	defer wcancel()
	for reloaded := false; !reloaded; {
		reloaded, err = h.library.TestSignals.Checked.Wait(wctx)
		require.NoError(t, err, logs.String())
	}
	require.NoError(t, fcallVersion())
	assert.Contains(t, logs.String(), "flowfabric library reloaded at run time")
	assert.Contains(t, logs.String(), `action=loaded found="no library"`)
	require.NoError(t, h.Ready(context.Background()))
}
