package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
)

// harness is a watcher on a manual clock over a config file and one
// plugin binary, recording what it asked for.
type harness struct {
	t       *testing.T
	w       *Watcher
	clk     *clock.Manual
	dir     string
	reloads chan struct{}
	swaps   chan string

	mu      sync.Mutex
	running string // the binary's running sha256
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewManual(time.Unix(1_700_000_000, 0)), dir: t.TempDir(),
		reloads: make(chan struct{}, 8), swaps: make(chan string, 8)}
	h.write("config.yaml", "a: 1")
	h.write("plugin", "v1")
	loadedSig, err := Stat(h.path("config.yaml"))
	require.NoError(t, err)
	loadedSHA, err := Hash(h.path("config.yaml"))
	require.NoError(t, err)
	h.running, err = Hash(h.path("plugin"))
	require.NoError(t, err)
	h.w = New(Config{
		Settings:   Settings{Config: true, Plugins: true},
		ConfigFile: func() (string, Sig, string) { return h.path("config.yaml"), loadedSig, loadedSHA },
		Reload:     func(context.Context) { h.reloads <- struct{}{} },
		Plugins: func() []Plugin {
			h.mu.Lock()
			defer h.mu.Unlock()
			return []Plugin{{Name: "s", Path: h.path("plugin"), Running: h.running, Swap: func(context.Context) { h.swaps <- "s" }}}
		},
		Clock: h.clk,
	})
	h.w.TestSignals.Polled.Init()
	h.w.TestSignals.SwapStarted.Init()
	require.NoError(t, h.w.Start(context.Background()))
	t.Cleanup(func() { assert.NoError(t, h.w.Stop(context.Background())) })
	return h
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

func (h *harness) write(name, content string) {
	h.t.Helper()
	// A new file renamed into place: a new inode, as operators should
	// install files.
	tmp := h.path("." + name + ".new")
	require.NoError(h.t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(h.t, os.Rename(tmp, h.path(name)))
}

// poll lets one interval pass and waits for the poll to end.
func (h *harness) poll() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := h.clk.WaitForTimer(ctx)
	require.NoError(h.t, err)
	require.Equal(h.t, DefaultInterval, d)
	h.clk.Advance(d)
	_, err = h.w.TestSignals.Polled.Wait(ctx)
	require.NoError(h.t, err)
}

func none[T any](t *testing.T, c <-chan T, what string) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("unexpected %s: %v", what, v)
	default:
	}
}

// A changed file is acted on once it looked the same on two polls in a
// row (not while it is still being written); a touched file whose
// contents are what was loaded is not.
func TestChangesAreActedOnOnceSettled(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.poll()
	none(t, h.reloads, "reload")
	none(t, h.swaps, "swap")

	h.write("config.yaml", "a: 2")
	h.write("plugin", "v2")
	h.poll()
	none(t, h.reloads, "reload while the file may still change")
	none(t, h.swaps, "swap while the file may still change")
	h.poll()
	<-h.reloads
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name, err := h.w.TestSignals.SwapStarted.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "s", name)
	assert.Equal(t, "s", <-h.swaps)
	h.poll()
	none(t, h.reloads, "a second reload of the same file")
	none(t, h.swaps, "a second swap of the same file")

	// Rewritten with the contents that were loaded: nothing to reload.
	h.write("config.yaml", "a: 1")
	h.poll()
	h.poll()
	none(t, h.reloads, "reload of the loaded contents")
}

// A binary replaced before the watch first looked at it differs from
// what runs: swapped at the first poll.
func TestBinaryReplacedBeforeTheFirstLookIsSwapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.write("plugin", "v2")
	h.poll()
	assert.Equal(t, "s", <-h.swaps)
}

// Settings apply from the next poll: with the plugins' watch off, a
// changed binary is left alone.
func TestRetune(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.w.Retune(Settings{Config: true})
	h.poll()
	h.write("plugin", "v2")
	h.poll()
	h.poll()
	none(t, h.swaps, "swap with the plugin watch off")
}
