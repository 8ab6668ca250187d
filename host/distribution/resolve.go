package distribution

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Artifact is a resolved, signature-verified plugin index.
type Artifact struct {
	Ref    Ref
	Target Source
	// Index is the signed image index, Desc its descriptor.
	Desc   ocispec.Descriptor
	Index  ocispec.Index
	Signer Signer
	// Evidence is what an offline check of the lock re-verifies.
	Evidence *Evidence
	Version  string
	Created  time.Time
	// Platforms are the index's platforms ("linux/amd64"), sorted.
	Platforms []string
}

// PlatformArtifact is one platform's manifest of an Artifact.
type PlatformArtifact struct {
	Platform string
	Manifest ocispec.Descriptor
	Declared Declared
	// Binary is the executable layer.
	Binary ocispec.Descriptor
	// Raw is the manifest as fetched (its digest verified).
	Raw []byte
}

// ErrNoPlatform: the index has no manifest for the platform asked for.
var ErrNoPlatform = errors.New("no artifact for this platform")

// Resolve resolves ref, fetches its index (its digest verified) and
// verifies a signature of the index by one of trust's keys valid at now
// or by one of its identities.
// Nothing is written.
func Resolve(ctx context.Context, ref string, access Access, trust Trust, now time.Time) (*Artifact, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	t, err := r.OpenSource(ctx, access)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	desc, err := t.Resolve(ctx, r.Reference())
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", ref, err)
	}
	if r.Digest != "" && desc.Digest.String() != r.Digest {
		return nil, fmt.Errorf("resolve %s: digest mismatch: it resolves to %s", ref, desc.Digest)
	}
	if desc.MediaType != ocispec.MediaTypeImageIndex {
		return nil, fmt.Errorf("%s is a %s, not a plugin artifact (an OCI image index of per-platform plugin manifests)", ref, desc.MediaType)
	}
	b, err := fetchLimited(ctx, t, desc, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", ref, err)
	}
	a := &Artifact{Ref: r, Target: t, Desc: desc}

	if err := json.Unmarshal(b, &a.Index); err != nil {
		return nil, fmt.Errorf("%s: index: %w", ref, err)
	}
	// The signature covers the index's digest, which covers every
	// platform's manifest, which covers its config and binary.
	if a.Signer, a.Evidence, err = verifySignature(ctx, t, desc, trust, now); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	a.Evidence.Index = b
	a.Version = a.Index.Annotations[VersionAnnotation]
	if c := a.Index.Annotations[CreatedAnnotation]; c != "" {
		a.Created, _ = time.Parse(time.RFC3339, c)
	}
	for _, m := range a.Index.Manifests {
		if m.Platform != nil {
			a.Platforms = append(a.Platforms, platformOf(m.Platform))
		}
	}
	slices.Sort(a.Platforms)
	return a, nil
}

func platformOf(p *ocispec.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// For fetches platform's manifest and declared manifest.
func (a *Artifact) For(ctx context.Context, platform string) (PlatformArtifact, error) {
	pa := PlatformArtifact{Platform: platform}
	for _, m := range a.Index.Manifests {
		if m.Platform != nil && platformOf(m.Platform) == platform {
			pa.Manifest = m
			break
		}
	}
	if pa.Manifest.Digest == "" {
		return pa, fmt.Errorf("%s: %w (%s); it has %s", a.Ref.Raw, ErrNoPlatform, platform, orNone(a.Platforms))
	}
	raw, err := fetchLimited(ctx, a.Target, pa.Manifest, 4<<20)
	if err != nil {
		return pa, fmt.Errorf("%s: %s manifest: %w", a.Ref.Raw, platform, err)
	}
	pa.Raw = raw
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return pa, fmt.Errorf("%s: %s manifest: %w", a.Ref.Raw, platform, err)
	}
	if m.ArtifactType != ArtifactType && m.Config.MediaType != ConfigMediaType {
		return pa, fmt.Errorf("%s: %s manifest is not a plugin (artifact type %q)", a.Ref.Raw, platform, m.ArtifactType)
	}
	if m.Config.MediaType != ConfigMediaType {
		return pa, fmt.Errorf("%s: %s manifest's config is %s, not the declared manifest (%s)", a.Ref.Raw, platform, m.Config.MediaType, ConfigMediaType)
	}
	cb, err := fetchLimited(ctx, a.Target, m.Config, 1<<20)
	if err != nil {
		return pa, fmt.Errorf("%s: %s declared manifest: %w", a.Ref.Raw, platform, err)
	}
	if pa.Declared, err = ParseDeclared(cb); err != nil {
		return pa, fmt.Errorf("%s: %s: %w", a.Ref.Raw, platform, err)
	}
	var bins []ocispec.Descriptor
	for _, l := range m.Layers {
		if l.MediaType == BinaryMediaType {
			bins = append(bins, l)
		}
	}
	if len(bins) != 1 {
		return pa, fmt.Errorf("%s: %s manifest has %d plugin binaries, not 1", a.Ref.Raw, platform, len(bins))
	}
	pa.Binary = bins[0]
	if _, err := sha256Hex(pa.Binary.Digest.String()); err != nil {
		return pa, fmt.Errorf("%s: %s binary: %w", a.Ref.Raw, platform, err)
	}
	return pa, nil
}

// LockEntry is the lock entry of a: every platform's manifest and binary
// digest, the declared scanners and policy digests of platform's
// declaration.
func (a *Artifact) LockEntry(ctx context.Context, main PlatformArtifact) (LockedPlugin, error) {
	lp := LockedPlugin{
		Reference: a.Ref.Raw, Repo: a.Ref.Repo, Digest: a.Desc.Digest.String(), Version: a.Version,
		Signer: a.Signer, Scanners: main.Declared.ScannerNames(), Policies: main.Declared.PolicyDigests(),
		Platforms: map[string]LockedPlatform{},
	}
	if a.Evidence != nil {
		ev := *a.Evidence
		ev.Manifests = map[string][]byte{}
		lp.Evidence = &ev
	}
	if !a.Created.IsZero() {
		lp.Created = a.Created.UTC().Format(time.RFC3339)
	}
	for _, p := range a.Platforms {
		pa := main
		if p != main.Platform {
			var err error
			if pa, err = a.For(ctx, p); err != nil {
				return lp, err
			}
			if pa.Declared.Plugin != main.Declared.Plugin {
				return lp, fmt.Errorf("%s: its %s binary is called %s, its %s binary %s", a.Ref.Raw, p, pa.Declared.Plugin, main.Platform, main.Declared.Plugin)
			}
		}
		hex, _ := sha256Hex(pa.Binary.Digest.String())
		lp.Platforms[p] = LockedPlatform{Manifest: pa.Manifest.Digest.String(), SHA256: hex}
		if lp.Evidence != nil {
			lp.Evidence.Manifests[p] = pa.Raw
		}
	}
	return lp, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
