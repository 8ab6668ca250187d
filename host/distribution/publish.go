package distribution

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/ffscan/ffscan/host/clock"
)

// PublishOptions are what `ffscan plugins publish` pushes.
type PublishOptions struct {
	// Binaries maps GOOS/GOARCH to each platform's executable.
	Binaries map[string]string
	// Declared is the declaration every platform's manifest carries.
	Declared Declared
	// Key signs the index (nil: unsigned, for tests of refusals).
	Key *ecdsa.PrivateKey
	// Created is the index's creation time (zero: Clock's now).
	Created time.Time
	// Clock is the publisher's (nil: clock.Real()).
	Clock clock.Clock
	// Access is how the registry is reached (HTTP, credentials).
	Access Access
	// NoReferrer and NoSigTag leave out one of the two signature forms.
	NoReferrer, NoSigTag bool
}

// Publish pushes one manifest per platform (the binary as its layer, the
// declaration as its config), the index over them tagged as ref's tag,
// and the index's signatures: a Sigstore bundle as an OCI referrer and a
// cosign simple-signing ".sig" tag.
func Publish(ctx context.Context, ref string, o PublishOptions) (ocispec.Descriptor, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if r.Tag == "" {
		return ocispec.Descriptor{}, fmt.Errorf("publish %s: a tag is needed", ref)
	}
	if r.Layout != "" && !r.Archive {
		if err := os.MkdirAll(r.Layout, 0o755); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	t, err := r.Open(o.Access)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := o.Declared.Validate(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("publish %s: declared manifest: %w", ref, err)
	}
	created := o.Created
	if created.IsZero() {
		if o.Clock == nil {
			o.Clock = clock.Real()
		}
		created = o.Clock.Now()
	}
	createdS := created.UTC().Format(time.RFC3339)
	cfg, err := json.Marshal(o.Declared)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	cfgDesc, err := pushBytes(ctx, t, ConfigMediaType, cfg)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push declared manifest: %w", err)
	}
	cfgDesc.MediaType = ConfigMediaType
	var manifests []ocispec.Descriptor
	plats := make([]string, 0, len(o.Binaries))
	for p := range o.Binaries {
		plats = append(plats, p)
	}
	slices.Sort(plats)
	for _, p := range plats {
		parts := strings.Split(p, "/")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return ocispec.Descriptor{}, fmt.Errorf("platform %q is not GOOS/GOARCH", p)
		}
		bin, err := os.ReadFile(o.Binaries[p])
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		bd, err := pushBytes(ctx, t, BinaryMediaType, bin)
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push %s binary: %w", p, err)
		}
		bd.Annotations = map[string]string{ocispec.AnnotationTitle: o.Declared.Plugin}
		md, err := oras.PackManifest(ctx, t, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{
			ConfigDescriptor:    &cfgDesc,
			Layers:              []ocispec.Descriptor{bd},
			ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: createdS},
		})
		if err != nil {
			return ocispec.Descriptor{}, fmt.Errorf("push %s manifest: %w", p, err)
		}
		plat := &ocispec.Platform{OS: parts[0], Architecture: parts[1]}
		if len(parts) == 3 {
			plat.Variant = parts[2]
		}
		md.Platform = plat
		md.Annotations = nil
		manifests = append(manifests, md)
	}
	idx := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: manifests,
		Annotations: map[string]string{CreatedAnnotation: createdS, VersionAnnotation: o.Declared.Version, ocispec.AnnotationTitle: o.Declared.Plugin},
	}
	ib, err := json.Marshal(idx)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc, err := pushBytes(ctx, t, ocispec.MediaTypeImageIndex, ib)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("push index: %w", err)
	}
	if err := t.Tag(ctx, desc, r.Tag); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("tag %s: %w", r.Tag, err)
	}
	if o.Key == nil {
		return desc, nil
	}
	if !o.NoReferrer {
		if err := AttachBundle(ctx, t, r.Repo, desc, o.Key); err != nil {
			return desc, err
		}
	}
	if !o.NoSigTag {
		if err := AttachSigTag(ctx, t, r.Repo, desc, o.Key); err != nil {
			return desc, err
		}
	}
	return desc, nil
}

// AttachBundle signs desc into a Sigstore bundle and pushes it as an OCI
// referrer of desc (cosign's new bundle format).
func AttachBundle(ctx context.Context, t Target, repo string, desc ocispec.Descriptor, k *ecdsa.PrivateKey) error {
	b, err := SignBundle(k, repo, desc.Digest.String())
	if err != nil {
		return err
	}
	return AttachBundleBytes(ctx, t, desc, b)
}

// AttachBundleBytes pushes bundle b as an OCI referrer of desc.
func AttachBundleBytes(ctx context.Context, t Target, desc ocispec.Descriptor, b []byte) error {
	ld, err := pushBytes(ctx, t, BundleMediaType, b)
	if err != nil {
		return fmt.Errorf("push signature bundle: %w", err)
	}
	subject := ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	if _, err := oras.PackManifest(ctx, t, oras.PackManifestVersion1_1, BundleMediaType, oras.PackManifestOptions{
		Subject: &subject, Layers: []ocispec.Descriptor{ld},
	}); err != nil {
		return fmt.Errorf("push signature referrer: %w", err)
	}
	return nil
}

// AttachSigTag pushes cosign's legacy signature of desc: a manifest
// tagged sha256-<hex>.sig with a simple-signing layer.
func AttachSigTag(ctx context.Context, t Target, repo string, desc ocispec.Descriptor, k *ecdsa.PrivateKey) error {
	payload, sig, err := SignSimple(k, repo, desc.Digest.String())
	if err != nil {
		return err
	}
	ld, err := pushBytes(ctx, t, SimpleSigningMediaType, payload)
	if err != nil {
		return fmt.Errorf("push signature payload: %w", err)
	}
	ld.Annotations = map[string]string{CosignSignatureAnnotation: sig}
	cd, err := pushBytes(ctx, t, ocispec.MediaTypeImageConfig, []byte(`{"architecture":"","config":{},"os":"","rootfs":{"type":"layers","diff_ids":[]}}`))
	if err != nil {
		return err
	}
	md, err := oras.PackManifest(ctx, t, oras.PackManifestVersion1_0, "", oras.PackManifestOptions{ConfigDescriptor: &cd, Layers: []ocispec.Descriptor{ld}})
	if err != nil {
		return fmt.Errorf("push signature manifest: %w", err)
	}
	tag := strings.Replace(desc.Digest.String(), ":", "-", 1) + ".sig"
	if err := t.Tag(ctx, md, tag); err != nil {
		return fmt.Errorf("tag %s: %w", tag, err)
	}
	return nil
}

// pushBytes pushes b unless the target already holds it.
func pushBytes(ctx context.Context, t Target, mediaType string, b []byte) (ocispec.Descriptor, error) {
	d := content.NewDescriptorFromBytes(mediaType, b)
	err := t.Push(ctx, d, bytes.NewReader(b))
	if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return d, err
	}
	return d, nil
}
