package distribution

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Lock is the lock file: what each installed plugin was installed from
// and the digests it must have. `ffscan plugins install` writes it before
// it places a binary; with plugin_signature: required the host launches
// only a binary whose sha256 is the one locked for this platform.
type Lock struct {
	Schema  int                     `json:"schema"`
	Plugins map[string]LockedPlugin `json:"plugins"`
}

// LockedPlugin is one plugin (keyed by its binary's file name).
type LockedPlugin struct {
	// Reference is what the operator installed (tag or digest).
	Reference string `json:"reference"`
	// Repo is the repository, Digest the signed index's digest.
	Repo   string `json:"repo"`
	Digest string `json:"digest"`
	// Version is the declared version.
	Version string `json:"version,omitempty"`
	// Created is the index's creation time (RFC 3339), the order of
	// two artifacts of one version.
	Created string `json:"created,omitempty"`
	// Signer is the trusted key a signature verified with, or the
	// trusted identity a keyless signature was certified for.
	Signer Signer `json:"signer"`
	// Scanners are the declared scanners, Policies each one's declared
	// policy digest.
	Scanners []string          `json:"scanners"`
	Policies map[string]string `json:"policies"`
	// Platforms maps GOOS/GOARCH to that platform's manifest and binary.
	Platforms map[string]LockedPlatform `json:"platforms"`
	// Evidence is what `ffscan plugins verify` re-checks offline: the
	// signed index, each platform's manifest and the signature.
	Evidence *Evidence `json:"evidence,omitempty"`
}

// Evidence links a locked binary to a trusted signature without the
// registry: the signature covers Index's digest, the index lists each
// manifest's digest, each manifest names its binary's digest.
type Evidence struct {
	Index     []byte            `json:"index"`
	Manifests map[string][]byte `json:"manifests"`
	// Bundle is a Sigstore bundle (via "referrer"); Payload and
	// Signature a cosign simple signing (via "sig-tag").
	Bundle    []byte `json:"bundle,omitempty"`
	Payload   []byte `json:"payload,omitempty"`
	Signature []byte `json:"signature,omitempty"`
}

// LockedPlatform is one platform's manifest digest and binary sha256.
type LockedPlatform struct {
	Manifest string `json:"manifest"`
	// SHA256 is the binary's hex sha256 (what scanners.NAME.sha256 pins).
	SHA256 string `json:"sha256"`
}

// ReadLock reads path; a missing file is an empty lock.
func ReadLock(path string) (*Lock, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Lock{Schema: 1, Plugins: map[string]LockedPlugin{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin lock: %w", err)
	}
	var l Lock
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("plugin lock %s: %w", path, err)
	}
	if l.Schema != 1 {
		return nil, fmt.Errorf("plugin lock %s: schema %d is not 1", path, l.Schema)
	}
	if l.Plugins == nil {
		l.Plugins = map[string]LockedPlugin{}
	}
	return &l, nil
}

// Write replaces path with l atomically (temp file in the same
// directory, fsync, rename, fsync of the directory).
func (l *Lock) Write(path string) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'), 0o644)
}

// CheckBinary says whether sha256 is the binary locked for plugin on
// this platform: what plugin_signature: required asks of every launch.
func (l *Lock) CheckBinary(plugin, sha string) error {
	lp, ok := l.Plugins[plugin]
	if !ok {
		return fmt.Errorf("plugin %s is not in the plugin lock (plugin_signature is required: install it with `ffscan plugins install`)", plugin)
	}
	pl, ok := lp.Platforms[Platform()]
	if !ok {
		return fmt.Errorf("plugin %s: the lock has no binary for %s", plugin, Platform())
	}
	if !strings.EqualFold(pl.SHA256, sha) {
		return fmt.Errorf("plugin %s: sha256 %s is not the locked %s (installed from %s, signed by %s); plugin_signature is required", plugin, sha, pl.SHA256, lp.Reference, lp.Signer)
	}
	return nil
}

// writeAtomic writes body to a hidden temporary file beside path, syncs
// it, renames it over path and syncs the directory.
func writeAtomic(path string, body []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, werr := tmp.Write(body)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr, os.Chmod(name, mode)); err != nil {
		os.Remove(name)
		return err
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// LockChecker is the check plugin_signature: required makes before every
// launch: the lock at path, read each time (an install rewrites it),
// must record sha256 for binary on this platform.
func LockChecker(path string) func(binary, sha256 string) error {
	return func(binary, sha string) error {
		l, err := ReadLock(path)
		if err != nil {
			return err
		}
		return l.CheckBinary(binary, sha)
	}
}

// VerifyOffline re-checks lp's chain from a trusted key's signature to
// every locked binary digest, with nothing but the lock and trust (key
// validity judged at now).
// A keyless signature is re-checked against trust.Root, the pinned
// trusted root: no network is needed.
func (lp LockedPlugin) VerifyOffline(trust Trust, now time.Time) (Signer, error) {
	ev := lp.Evidence
	if ev == nil {
		return Signer{}, errors.New("the lock holds no evidence to check (written by an older ffscan?): install it again")
	}
	if d := "sha256:" + SHA256Hex(ev.Index); d != lp.Digest {
		return Signer{}, fmt.Errorf("the locked index hashes to %s, not the locked digest %s", d, lp.Digest)
	}
	c := candidate{via: lp.Signer.Via, bundle: ev.Bundle, payload: ev.Payload, sig: ev.Signature}
	s, _, err := verifyCandidates([]candidate{c}, ocispec.Descriptor{Digest: digest.Digest(lp.Digest)}, trust, now)
	if err != nil {
		return s, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(ev.Index, &idx); err != nil {
		return s, fmt.Errorf("locked index: %w", err)
	}
	for _, p := range slices.Sorted(maps.Keys(lp.Platforms)) {
		pl := lp.Platforms[p]
		if !slices.ContainsFunc(idx.Manifests, func(d ocispec.Descriptor) bool {
			return d.Platform != nil && platformOf(d.Platform) == p && d.Digest.String() == pl.Manifest
		}) {
			return s, fmt.Errorf("%s: the signed index does not list manifest %s", p, pl.Manifest)
		}
		raw := ev.Manifests[p]
		if d := "sha256:" + SHA256Hex(raw); d != pl.Manifest {
			return s, fmt.Errorf("%s: the locked manifest hashes to %s, not %s", p, d, pl.Manifest)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return s, fmt.Errorf("%s manifest: %w", p, err)
		}
		if !slices.ContainsFunc(m.Layers, func(l ocispec.Descriptor) bool {
			return l.MediaType == BinaryMediaType && l.Digest.String() == "sha256:"+pl.SHA256
		}) {
			return s, fmt.Errorf("%s: the signed manifest's binary is not the locked sha256 %s", p, pl.SHA256)
		}
	}
	if !s.same(lp.Signer) {
		return s, fmt.Errorf("signed by %s (%s), the lock says %s (%s)", s, s.Fingerprint, lp.Signer, lp.Signer.Fingerprint)
	}
	return s, nil
}
