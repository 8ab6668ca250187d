package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ffscan/ffscan/host/supervisor"
)

// The host polls the files it reacts to (the configuration file and every
// running scanner's plugin binary) instead of using inotify: one stat per
// file per interval is cheap, works the same on every filesystem (network
// mounts, overlays, container volumes where inotify misses changes) and
// needs no extra dependency. A change is acted on once the file looked the
// same on two polls in a row, so a binary still being copied is not
// launched half-written; an atomic replace (write elsewhere, rename into
// place) is the recommended way to install one anyway.

// fileSig is what a poll compares: a replaced file gets a new inode, an
// edited one a new size or modification time.
type fileSig struct {
	ok    bool
	size  int64
	mtime time.Time
	ino   uint64
	mode  os.FileMode
}

func statFile(path string) (fileSig, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{}, err
	}
	sig := fileSig{ok: true, size: fi.Size(), mtime: fi.ModTime(), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		sig.ino = uint64(st.Ino)
	}
	return sig, nil
}

func hashFile(path string) (string, error) {
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

// fileWatch debounces one file's changes. Owned by the watch goroutine.
type fileWatch struct {
	seen    bool
	last    fileSig // the state last acted on
	pending *fileSig
	busy    bool // a swap it triggered is still running
}

// changed reports whether the file settled into a new state: it differs
// from the last one acted on and looked the same on the previous poll.
func (w *fileWatch) changed(sig fileSig) bool {
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

// watchFiles polls the configuration file and the plugin binaries every
// watch.interval until ctx ends.
func (h *Host) watchFiles(ctx context.Context) {
	var cfgWatch fileWatch
	swapDone := make(chan string, 16)
	for {
		iv := h.config().Watch.Interval
		t := time.NewTimer(iv)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		cfg := h.config()
		if cfg.Watch.Config {
			h.pollConfig(ctx, &cfgWatch)
		}
		// Swaps the watch started report back here, so their busy flag is
		// only ever touched by this goroutine.
	drain:
		for {
			select {
			case name := <-swapDone:
				h.mu.Lock()
				if u := h.units[name]; u != nil {
					u.watch.busy = false
				}
				h.mu.Unlock()
			default:
				break drain
			}
		}
		if cfg.Watch.Plugins {
			h.pollPlugins(ctx, swapDone)
		}
	}
}

// pollConfig reloads the configuration once its file settled into new
// contents.
func (h *Host) pollConfig(ctx context.Context, w *fileWatch) {
	h.relMu.Lock()
	file := h.src.File
	if !w.seen {
		w.seen, w.last = true, h.reloads.fileSig
	}
	loadedSHA := h.reloads.fileSHA
	h.relMu.Unlock()
	if file == "" {
		return
	}
	sig, err := statFile(file)
	if err != nil {
		sig = fileSig{} // gone: a later reappearance is a change
	}
	if !w.changed(sig) || !sig.ok {
		return
	}
	if sha, err := hashFile(file); err == nil && sha == loadedSHA {
		return // touched, not changed
	}
	h.log.Info("configuration file changed; reloading", "file", file)
	if _, err := h.ReloadConfig(ctx, "config file changed"); err != nil {
		h.log.Error("configuration reload failed", "error", err)
	}
}

// pollPlugins starts a hot swap for every scanner whose binary settled
// into new contents. The supervisor compares the file's sha256 with the
// running one's, so a touched file costs one hash and nothing else.
func (h *Host) pollPlugins(ctx context.Context, done chan<- string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, u := range h.units {
		if u.watch.busy {
			continue
		}
		path := filepath.Join(h.cat.Dir(), u.sc.Plugin)
		sig, err := statFile(path)
		if err != nil {
			sig = fileSig{}
		}
		first := !u.watch.seen
		if first {
			// The first look is the baseline. A file replaced between the
			// launch and now is caught by comparing hashes below.
			u.watch.seen, u.watch.last = true, sig
		}
		trigger := !first && u.watch.changed(sig) && sig.ok
		if first && sig.ok {
			st := u.sup.Status()
			if st.State == supervisor.StateRunning && st.Meta.SHA256 != "" {
				if sha, err := hashFile(path); err == nil && sha != st.Meta.SHA256 {
					trigger = true
				}
			}
		}
		if !trigger {
			continue
		}
		u.watch.busy = true
		h.log.Info("plugin binary changed; hot-swapping", "scanner", name, "path", path)
		go func() {
			defer func() {
				select {
				case done <- name:
				case <-ctx.Done():
				}
			}()
			res, err := u.sup.Swap(ctx, false, "binary changed on disk", nil)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					h.log.Error("hot swap request failed", "scanner", name, "error", err)
				}
			case res.Outcome == supervisor.SwapFailed:
				h.log.Error("hot swap refused; the running plugin keeps serving", "scanner", name, "error", res.Err)
			case res.Outcome == supervisor.SwapUnchanged:
				h.log.Debug("plugin binary touched but unchanged", "scanner", name)
			}
		}()
	}
}
