// Package filewatch follows the files a running host reacts to: the
// configuration file (a change reloads it) and every running scanner's
// plugin binary (a change hot-swaps it).
//
// It polls instead of using inotify: one stat per file per interval is
// cheap, works the same on every filesystem (network mounts, overlays,
// container volumes where inotify misses changes) and needs no extra
// dependency. A change is acted on once the file looked the same on two
// polls in a row, so a binary still being copied is not launched
// half-written; an atomic replace (write elsewhere, rename into place) is
// the recommended way to install one anyway.
package filewatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/testsignal"
	"github.com/ffscan/ffscan/host/service"
)

// DefaultInterval is the time between two polls.
const DefaultInterval = time.Second

// Bounds of the interval (watch.interval): more often costs stats for
// nothing, less often leaves an operator waiting.
const (
	MinInterval = 100 * time.Millisecond
	MaxInterval = time.Hour
)

// Sig is what a poll compares: a replaced file gets a new inode, an
// edited one a new size or modification time.
type Sig struct {
	ok    bool
	size  int64
	mtime time.Time
	ino   uint64
	mode  os.FileMode
}

// Stat returns path's Sig.
func Stat(path string) (Sig, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Sig{}, err
	}
	sig := Sig{ok: true, size: fi.Size(), mtime: fi.ModTime(), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		sig.ino = uint64(st.Ino)
	}
	return sig, nil
}

// Hash returns the hex sha256 of path's contents.
func Hash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// settle debounces one file's changes. Owned by the watch goroutine.
type settle struct {
	seen    bool
	last    Sig // the state last acted on
	pending *Sig
}

// changed reports whether the file settled into a new state: it differs
// from the last one acted on and looked the same on the previous poll.
func (w *settle) changed(sig Sig) bool {
	if sig == w.last {
		w.pending = nil
		return false
	}
	if w.pending != nil && *w.pending == sig {
		w.last, w.pending = sig, nil
		return true
	}
	w.pending = &sig
	return false
}

// Settings are what the configuration says (watch.*); a reload changes
// them.
type Settings struct {
	// Config reloads the configuration when its file changes.
	Config bool
	// Plugins hot-swaps a scanner whose plugin binary changed.
	Plugins  bool
	Interval time.Duration
}

func (s Settings) withDefaults() Settings {
	service.Default(&s.Interval, DefaultInterval)
	return s
}

// Plugin is a running scanner's binary the watch follows.
type Plugin struct {
	Name string
	Path string
	// Running is the sha256 of the binary that runs now; empty when
	// unknown (the scanner is not running).
	Running string
	// Swap hot-swaps the scanner to the file on disk (the supervisor
	// compares the file's sha256 with the running one's, so a touched
	// file costs one hash and nothing else).
	Swap func(ctx context.Context)
}

// Config configures a Watcher. Zero fields take their defaults; nil
// functions watch nothing of their kind.
type Config struct {
	Settings
	// ConfigFile returns the configuration file (empty: none) and its Sig
	// and sha256 when it was last loaded.
	ConfigFile func() (path string, loaded Sig, sha string)
	// Reload reloads the configuration after its file changed.
	Reload func(ctx context.Context)
	// Plugins lists the running scanners' binaries.
	Plugins func() []Plugin
	Clock   clock.Clock
	Logger  hclog.Logger
}

func (c Config) withDefaults() Config {
	c.Settings = c.Settings.withDefaults()
	if c.ConfigFile == nil {
		c.ConfigFile = func() (string, Sig, string) { return "", Sig{}, "" }
	}
	if c.Reload == nil {
		c.Reload = func(context.Context) {}
	}
	if c.Plugins == nil {
		c.Plugins = func() []Plugin { return nil }
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Watcher polls the configuration file and the plugin binaries.
type Watcher struct {
	loop  service.Loop
	cfg   Config
	log   hclog.Logger
	swaps sync.WaitGroup

	mu       sync.Mutex
	settings Settings

	// Owned by the watch goroutine.
	config  settle
	plugins map[string]*pluginWatch
	swapped chan string // a swap the watch started ended

	// TestSignals fire at the watcher's events for tests that Init them.
	TestSignals TestSignals
}

// TestSignals are a Watcher's events.
type TestSignals struct {
	// Polled: a poll ended.
	Polled testsignal.Signal[struct{}]
	// SwapStarted: a changed binary is being swapped in (the scanner's
	// name).
	SwapStarted testsignal.Signal[string]
}

// pluginWatch is the watch of one scanner's binary.
type pluginWatch struct {
	path string
	settle
	busy bool // a swap it started is still running
}

// New returns a watcher; Start runs it.
func New(cfg Config) *Watcher {
	cfg = cfg.withDefaults()
	return &Watcher{cfg: cfg, log: cfg.Logger, settings: cfg.Settings, plugins: map[string]*pluginWatch{}, swapped: make(chan string, 16)}
}

// Retune applies new settings from the next poll (a reload).
func (w *Watcher) Retune(s Settings) {
	w.mu.Lock()
	w.settings = s.withDefaults()
	w.mu.Unlock()
}

func (w *Watcher) current() Settings {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.settings
}

// Start polls every interval until Stop or until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	return w.loop.Start(ctx, w.run)
}

// Stop stops polling and waits, until ctx ends, for the swaps it started
// (they end with it).
func (w *Watcher) Stop(ctx context.Context) error {
	if err := w.loop.Stop(ctx); err != nil {
		return err
	}
	return service.Wait(ctx, service.Drained(&w.swaps))
}

func (w *Watcher) run(ctx context.Context) {
	for {
		s := w.current()
		if !clock.Sleep(ctx, w.cfg.Clock, s.Interval) {
			return
		}
		if s.Config {
			w.pollConfig(ctx)
		}
		w.swapsEnded()
		if s.Plugins {
			w.pollPlugins(ctx)
		}
		w.TestSignals.Polled.Signal(struct{}{})
	}
}

// pollConfig reloads the configuration once its file settled into new
// contents.
func (w *Watcher) pollConfig(ctx context.Context) {
	file, loaded, loadedSHA := w.cfg.ConfigFile()
	if file == "" {
		return
	}
	if !w.config.seen {
		w.config.seen, w.config.last = true, loaded
	}
	sig, err := Stat(file)
	if err != nil {
		sig = Sig{} // gone: a later reappearance is a change
	}
	if !w.config.changed(sig) || !sig.ok {
		return
	}
	if sha, err := Hash(file); err == nil && sha == loadedSHA {
		return // touched, not changed
	}
	w.log.Info("configuration file changed; reloading", "file", file)
	w.cfg.Reload(ctx)
}

// swapsEnded takes the reports of the swaps the watch started, so that
// their busy flags are only ever touched by the watch goroutine.
func (w *Watcher) swapsEnded() {
	for {
		select {
		case name := <-w.swapped:
			if pw := w.plugins[name]; pw != nil {
				pw.busy = false
			}
		default:
			return
		}
	}
}

// pollPlugins starts a hot swap for every scanner whose binary settled
// into new contents.
func (w *Watcher) pollPlugins(ctx context.Context) {
	running := map[string]bool{}
	for _, p := range w.cfg.Plugins() {
		running[p.Name] = true
		pw := w.plugins[p.Name]
		if pw == nil || pw.path != p.Path {
			// A scanner started, or given another binary, since the last
			// poll: its watch starts afresh.
			pw = &pluginWatch{path: p.Path}
			w.plugins[p.Name] = pw
		}
		if pw.busy || !pw.trigger(p) {
			continue
		}
		pw.busy = true
		w.log.Info("plugin binary changed; hot-swapping", "scanner", p.Name, "path", p.Path)
		w.TestSignals.SwapStarted.Signal(p.Name)
		w.swaps.Add(1)
		go func() {
			defer w.swaps.Done()
			p.Swap(ctx)
			select {
			case w.swapped <- p.Name:
			case <-ctx.Done():
			}
		}()
	}
	for name, pw := range w.plugins {
		if !running[name] && !pw.busy {
			delete(w.plugins, name)
		}
	}
}

// trigger reports whether p's binary changed. The first look is the
// baseline; a file replaced between the launch and then is caught by
// comparing its hash with the running one's.
func (pw *pluginWatch) trigger(p Plugin) bool {
	sig, err := Stat(p.Path)
	if err != nil {
		sig = Sig{}
	}
	if !pw.seen {
		pw.seen, pw.last = true, sig
		if !sig.ok || p.Running == "" {
			return false
		}
		sha, err := Hash(p.Path)
		return err == nil && sha != p.Running
	}
	return pw.changed(sig) && sig.ok
}
