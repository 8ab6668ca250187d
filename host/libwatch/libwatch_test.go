package libwatch_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/libwatch"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/testserver"
)

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

// A check on the watch's clock finds the library the server lost and
// loads it again, saying so; a check that finds it in place changes
// nothing.
func TestWatchReloadsALostLibrary(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	lib, err := boot.LoadLibrary(ctx, c, false, hclog.NewNullLogger())
	require.NoError(t, err)
	logs := &lockedBuffer{}
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	w := libwatch.New(lib, libwatch.Config{Clock: clk, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: logs})})
	w.TestSignals.Checked.Init()
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { assert.NoError(t, w.Stop(context.Background())) })
	check := func() bool {
		t.Helper()
		require.NoError(t, clk.WaitFor(ctx, 1))
		clk.Advance(libwatch.DefaultInterval)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		reloaded, err := w.TestSignals.Checked.Wait(wctx)
		require.NoError(t, err)
		return reloaded
	}

	assert.False(t, check(), "the library is in place")
	assert.Empty(t, logs.String())

	require.NoError(t, c.Do(ctx, c.B().FunctionFlush().Build()).Error())
	fcallVersion := func() error {
		return c.Do(ctx, c.B().Fcall().Function("ff_version").Numkeys(0).Build()).Error()
	}
	require.True(t, lua.IsFunctionNotFound(fcallVersion()), "the server lost the library")
	assert.True(t, check())
	require.NoError(t, fcallVersion())
	assert.Contains(t, logs.String(), "flowfabric library reloaded at run time")
	assert.Contains(t, logs.String(), `action=loaded found="no library"`)
	assert.NoError(t, w.Err())
}

// A failed check is checked again when readiness asks (Verify), not
// only at the next interval: once what made it fail is gone, the watch
// is ready at once, whenever its last check ran.
func TestVerifyChecksAFailureAgain(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	lib, err := boot.LoadLibrary(ctx, c, false, hclog.NewNullLogger())
	require.NoError(t, err)
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	w := libwatch.New(lib, libwatch.Config{Clock: clk})
	require.NoError(t, w.Verify(ctx), "nothing failed yet")

	// Another application's library under our name: refused.
	foreign := "#!lua name=flowfabric\nredis.register_function('theirs', function() return 1 end)\n"
	require.NoError(t, c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(foreign).Build()).Error())
	require.Error(t, w.Check(ctx))
	require.Error(t, w.Err())
	require.Error(t, w.Verify(ctx), "still there: still failing")

	// Gone: the next readiness question loads ours, without waiting for
	// the watch's clock.
	require.NoError(t, c.Do(ctx, c.B().FunctionDelete().LibraryName("flowfabric").Build()).Error())
	require.NoError(t, w.Verify(ctx))
	assert.NoError(t, w.Err())
	require.NoError(t, c.Do(ctx, c.B().Fcall().Function("ff_version").Numkeys(0).Build()).Error())
}
