package distribution

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/root"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/filelock"
)

// Options are an install's settings (from host/config and flags).
type Options struct {
	// PluginDir is where the binary goes, LockFile the lock.
	PluginDir string
	LockFile  string
	// Keys are the trusted signers (plugin_trust.keys).
	Keys []TrustedKey
	// Identities are the trusted keyless signers
	// (plugin_trust.identities), TrustedRoot the pinned root their
	// certificates are checked against (plugin_trust.trusted_root).
	Identities  []TrustedIdentity
	TrustedRoot root.TrustedMaterial
	// Allowed bounds the declared policy (plugin_trust.allow_*).
	Allowed Allowed
	// Access is how registries are reached (HTTP, credentials).
	Access Access
	// DryRun checks everything and changes nothing.
	DryRun bool
	// AllowDowngrade installs an artifact older than the locked one.
	AllowDowngrade bool
	// Platform is GOOS/GOARCH (default: this host's).
	Platform string
	// Plugin, when set, is the name the artifact must declare (upgrade).
	Plugin string
	// Clock judges the keys' validity (nil: clock.Real()).
	Clock clock.Clock
}

// Trust is o's keys, identities and trusted root.
func (o Options) Trust() Trust {
	return Trust{Keys: o.Keys, Identities: o.Identities, Root: o.TrustedRoot}
}

// ErrDowngrade: the artifact is older than the locked one.
var ErrDowngrade = errors.New("downgrade refused")

// Result is what an install did (or, dry, would do).
type Result struct {
	Plugin   string
	Path     string
	Declared Declared
	Locked   LockedPlugin
	// Previous is the lock entry replaced (nil: a new plugin).
	Previous *LockedPlugin
	// Unchanged: the locked digest is already installed.
	Unchanged bool
	DryRun    bool
}

// Install resolves ref, verifies its signature, checks what it declares
// against this host, records it in the lock and places its binary for
// this platform in PluginDir atomically. Every refusal happens before the
// lock or PluginDir change.
func Install(ctx context.Context, ref string, o Options) (Result, error) {
	if o.Platform == "" {
		o.Platform = Platform()
	}
	if !o.DryRun {
		unlock, err := filelock.Dir(filepath.Dir(o.LockFile))
		if err != nil {
			return Result{}, fmt.Errorf("plugin lock: %w", err)
		}
		defer unlock()
	}
	lock, err := ReadLock(o.LockFile)
	if err != nil {
		return Result{}, err
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	a, err := Resolve(ctx, ref, o.Access, o.Trust(), o.Clock.Now())
	if err != nil {
		return Result{}, err
	}
	pa, err := a.For(ctx, o.Platform)
	if err != nil {
		return Result{}, err
	}
	d := pa.Declared
	if err := d.Check(o.Allowed); err != nil {
		return Result{}, fmt.Errorf("%s: refused: %w", ref, err)
	}
	if o.Plugin != "" && d.Plugin != o.Plugin {
		return Result{}, fmt.Errorf("%s declares plugin %s, not %s", ref, d.Plugin, o.Plugin)
	}
	for name, lp := range lock.Plugins {
		if name == d.Plugin {
			continue
		}
		for _, s := range d.ScannerNames() {
			if slices.Contains(lp.Scanners, s) {
				return Result{}, fmt.Errorf("%s: scanner %s is already served by locked plugin %s (two binaries declaring one scanner make the host refuse to choose)", ref, s, name)
			}
		}
	}
	entry, err := a.LockEntry(ctx, pa)
	if err != nil {
		return Result{}, err
	}
	res := Result{Plugin: d.Plugin, Path: filepath.Join(o.PluginDir, d.Plugin), Declared: d, Locked: entry, DryRun: o.DryRun}
	if prev, ok := lock.Plugins[d.Plugin]; ok {
		res.Previous = &prev
		if err := checkDowngrade(prev, entry); err != nil && !o.AllowDowngrade {
			return res, fmt.Errorf("%s: %w", ref, err)
		}
	}
	have, _ := hashPath(res.Path)
	if res.Previous != nil && res.Previous.Digest == entry.Digest && have == entry.Platforms[o.Platform].SHA256 {
		res.Unchanged = true
		return res, nil
	}
	if o.DryRun {
		return res, nil
	}
	// Fetch into a hidden file beside the target (the catalog and the
	// file watch ignore hidden files), verifying size and digest.
	tmp, err := fetchBinary(ctx, a.Target, pa.Binary, o.PluginDir, d.Plugin)
	if err != nil {
		return res, fmt.Errorf("%s: %w", ref, err)
	}
	defer os.Remove(tmp)
	// The lock first: a host with plugin_signature: required that sees
	// the new file must find it locked.
	old := *lock
	old.Plugins = maps.Clone(lock.Plugins)
	lock.Plugins[d.Plugin] = entry
	if err := lock.Write(o.LockFile); err != nil {
		return res, fmt.Errorf("write plugin lock: %w", err)
	}
	if err := os.Rename(tmp, res.Path); err != nil {
		_ = old.Write(o.LockFile)
		return res, fmt.Errorf("place %s: %w (the lock is restored)", res.Path, err)
	}
	if err := syncDir(o.PluginDir); err != nil {
		return res, fmt.Errorf("sync %s: %w", o.PluginDir, err)
	}
	return res, nil
}

// checkDowngrade refuses an artifact older than the locked one: a lower
// version, or the same (or no) version created earlier.
func checkDowngrade(prev, next LockedPlugin) error {
	if prev.Digest == next.Digest {
		return nil
	}
	if prev.Version != "" && next.Version != "" && olderVersion(next.Version, prev.Version) {
		return fmt.Errorf("%w: version %s is older than the locked %s (%s); --allow-downgrade installs it anyway", ErrDowngrade, next.Version, prev.Version, prev.Digest)
	}
	if prev.Version == next.Version || prev.Version == "" || next.Version == "" {
		pc, e1 := time.Parse(time.RFC3339, prev.Created)
		nc, e2 := time.Parse(time.RFC3339, next.Created)
		if e1 == nil && e2 == nil && nc.Before(pc) {
			return fmt.Errorf("%w: it was created %s, before the locked %s (%s, %s); --allow-downgrade installs it anyway", ErrDowngrade, next.Created, prev.Digest, prev.Version, prev.Created)
		}
	}
	return nil
}

// MaxBinarySize bounds a plugin binary an install fetches: the signed
// manifest states the size, but a signer's mistake (or a key's misuse)
// must not fill plugin_dir's disk.
const MaxBinarySize = 512 << 20

// fetchBinary streams the binary into a hidden temporary file in dir,
// checking its size and sha256 against the descriptor, synced, mode 0755.
func fetchBinary(ctx context.Context, t Source, desc ocispec.Descriptor, dir, name string) (string, error) {
	want, err := sha256Hex(desc.Digest.String())
	if err != nil {
		return "", err
	}
	if desc.Size <= 0 || desc.Size > MaxBinarySize {
		return "", fmt.Errorf("binary %s: %d bytes is not in 1..%d", desc.Digest, desc.Size, MaxBinarySize)
	}
	rc, err := t.Fetch(ctx, desc)
	if err != nil {
		return "", fmt.Errorf("fetch binary %s: %w", desc.Digest, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(dir, "."+name+".install-*")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(rc, desc.Size+1))
	if err == nil && n != desc.Size {
		err = fmt.Errorf("binary %s: %d bytes, not the %d its manifest says", desc.Digest, n, desc.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); err == nil && got != want {
		err = fmt.Errorf("binary digest mismatch: the bytes fetched hash to sha256:%s, the signed manifest names %s", got, desc.Digest)
	}
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Chmod(f.Name(), 0o755)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func hashPath(path string) (string, error) {
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

// LockOnly resolves and verifies ref and records it in the lock for
// every platform without placing anything (`ffscan plugins lock`).
func LockOnly(ctx context.Context, ref string, o Options) (Result, error) {
	unlock, err := filelock.Dir(filepath.Dir(o.LockFile))
	if err != nil {
		return Result{}, fmt.Errorf("plugin lock: %w", err)
	}
	defer unlock()
	o.DryRun = true
	res, err := Install(ctx, ref, o)
	if err != nil || res.Unchanged {
		return res, err
	}
	lock, err := ReadLock(o.LockFile)
	if err != nil {
		return res, err
	}
	lock.Plugins[res.Plugin] = res.Locked
	return res, lock.Write(o.LockFile)
}
