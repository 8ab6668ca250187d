package distribution

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry"
)

// maxSignatures bounds the signatures of each form an install fetches and
// tries.
const maxSignatures = 16

// ErrUnsigned: no signature of the artifact was found at all.
var ErrUnsigned = errors.New("no signature found (neither a Sigstore bundle referrer nor a cosign .sig tag)")

// ErrUntrusted: signatures were found but none verifies with a trusted key.
var ErrUntrusted = errors.New("no signature verifies with a trusted key")

// Signer is who signed an artifact, as verified.
type Signer struct {
	// Key is the trusted key's name, Fingerprint its fingerprint.
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"`
	// Via is how: "referrer" (Sigstore bundle) or "sig-tag" (cosign
	// simple signing).
	Via string `json:"via"`
}

// signature found for an artifact, not yet verified.
type candidate struct {
	via    string
	bundle []byte // Sigstore bundle JSON (referrer)
	// cosign simple signing
	payload []byte
	sig     []byte
}

// VerifySignature finds the signatures of desc in repo (the OCI referrers
// of artifact type BundleMediaType, and the cosign tag
// sha256-<hex>.sig) and returns the first trusted key one of them
// verifies with. now is the time key validity is judged at.
func VerifySignature(ctx context.Context, repo Source, desc ocispec.Descriptor, keys []TrustedKey, now time.Time) (Signer, error) {
	s, _, err := verifySignature(ctx, repo, desc, keys, now)
	return s, err
}

func verifySignature(ctx context.Context, repo Source, desc ocispec.Descriptor, keys []TrustedKey, now time.Time) (Signer, *Evidence, error) {
	if len(keys) == 0 {
		return Signer{}, nil, errors.New("no trusted keys are configured (plugin_trust.keys)")
	}
	cands, err := findSignatures(ctx, repo, desc)
	if err != nil {
		return Signer{}, nil, err
	}
	if len(cands) == 0 {
		return Signer{}, nil, fmt.Errorf("%s: %w", desc.Digest, ErrUnsigned)
	}
	s, c, err := verifyCandidates(cands, desc, keys, now)
	if err != nil {
		return s, nil, err
	}
	return s, &Evidence{Bundle: c.bundle, Payload: c.payload, Signature: c.sig}, nil
}

func verifyCandidates(cands []candidate, desc ocispec.Descriptor, keys []TrustedKey, now time.Time) (Signer, candidate, error) {
	var why []string
	for _, c := range cands {
		for _, k := range keys {
			err := verifyOne(c, desc, k, now)
			if err == nil {
				return Signer{Key: k.Name, Fingerprint: Fingerprint(k.Key), Via: c.via}, c, nil
			}
			why = append(why, fmt.Sprintf("%s signature with key %s: %v", c.via, k.Name, err))
		}
	}
	return Signer{}, candidate{}, fmt.Errorf("%s: %w:\n  %s", desc.Digest, ErrUntrusted, strings.Join(why, "\n  "))
}

func findSignatures(ctx context.Context, repo Source, desc ocispec.Descriptor) ([]candidate, error) {
	var out []candidate
	refs, err := registry.Referrers(ctx, repo, desc, BundleMediaType)
	if err != nil && !isNotFound(err) {
		return nil, fmt.Errorf("referrers of %s: %w", desc.Digest, err)
	}
	if len(refs) > maxSignatures {
		// Each is fetched and tried with every key: bound the work an
		// artifact's referrers can make.
		refs = refs[:maxSignatures]
	}
	for _, r := range refs {
		m, err := fetchManifest(ctx, repo, r)
		if err != nil {
			return nil, fmt.Errorf("signature referrer %s: %w", r.Digest, err)
		}
		for _, l := range m.Layers {
			if l.MediaType != BundleMediaType || len(out) >= maxSignatures {
				continue
			}
			b, err := fetchLimited(ctx, repo, l, 1<<20)
			if err != nil {
				return nil, fmt.Errorf("signature bundle %s: %w", l.Digest, err)
			}
			out = append(out, candidate{via: "referrer", bundle: b})
		}
	}
	tag := strings.Replace(desc.Digest.String(), ":", "-", 1) + ".sig"
	sd, err := repo.Resolve(ctx, tag)
	if err != nil {
		if !isNotFound(err) {
			return nil, fmt.Errorf("cosign signature tag %s: %w", tag, err)
		}
		return out, nil
	}
	m, err := fetchManifest(ctx, repo, sd)
	if err != nil {
		return nil, fmt.Errorf("cosign signature tag %s: %w", tag, err)
	}
	for i, l := range m.Layers {
		if l.MediaType != SimpleSigningMediaType || i >= maxSignatures {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[CosignSignatureAnnotation])
		if err != nil || len(sig) == 0 {
			continue
		}
		p, err := fetchLimited(ctx, repo, l, 1<<20)
		if err != nil {
			return nil, fmt.Errorf("cosign signature payload %s: %w", l.Digest, err)
		}
		out = append(out, candidate{via: "sig-tag", payload: p, sig: sig})
	}
	return out, nil
}

func isNotFound(err error) bool {
	return errors.Is(err, errNotFound()) || strings.Contains(err.Error(), "not found")
}

// verifyOne checks one signature with one key through sigstore-go: a
// bundle must be a DSSE in-toto statement whose subject is desc's
// digest; a simple-signing signature must verify over its payload, and
// the payload must name desc's digest.
func verifyOne(c candidate, desc ocispec.Descriptor, k TrustedKey, now time.Time) error {
	sv, err := signature.LoadECDSAVerifier(k.Key, cryptoSHA256)
	if err != nil {
		return err
	}
	notAfter := k.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if !k.NotAfter.IsZero() && now.After(k.NotAfter) {
		return fmt.Errorf("key expired at %s", k.NotAfter.UTC().Format(time.RFC3339))
	}
	if !k.NotBefore.IsZero() && now.Before(k.NotBefore) {
		return fmt.Errorf("key is not valid before %s", k.NotBefore.UTC().Format(time.RFC3339))
	}
	ek := root.NewExpiringKey(sv, k.NotBefore, notAfter)
	tm := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) { return ek, nil })
	v, err := verify.NewVerifier(tm, verify.WithCurrentTime())
	if err != nil {
		return err
	}
	hexDigest, err := sha256Hex(desc.Digest.String())
	if err != nil {
		return err
	}
	raw, _ := hexDecode(hexDigest)
	switch c.via {
	case "referrer":
		var b bundle.Bundle
		if err := b.UnmarshalJSON(c.bundle); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		if b.GetDsseEnvelope() == nil {
			return errors.New("bundle holds no DSSE envelope (an in-toto statement about the artifact is expected)")
		}
		_, err := v.Verify(&b, verify.NewPolicy(verify.WithArtifactDigest("sha256", raw), verify.WithKey()))
		return err
	default:
		pb := &protobundle.Bundle{
			MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
			VerificationMaterial: &protobundle.VerificationMaterial{
				Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: k.Name}},
			},
			Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
				MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: sha256Sum(c.payload)},
				Signature:     c.sig,
			}},
		}
		b, err := bundle.NewBundle(pb)
		if err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		if _, err := v.Verify(b, verify.NewPolicy(verify.WithArtifact(bytes.NewReader(c.payload)), verify.WithKey())); err != nil {
			return err
		}
		var p simpleSigning
		if err := json.Unmarshal(c.payload, &p); err != nil {
			return fmt.Errorf("payload: %w", err)
		}
		if p.Critical.Image.DockerManifestDigest != desc.Digest.String() {
			return fmt.Errorf("the signed payload names %s, not this artifact (%s)", p.Critical.Image.DockerManifestDigest, desc.Digest)
		}
		return nil
	}
}

func fetchManifest(ctx context.Context, repo Source, d ocispec.Descriptor) (ocispec.Manifest, error) {
	var m ocispec.Manifest
	b, err := fetchLimited(ctx, repo, d, 4<<20)
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// fetchLimited fetches a small blob or manifest, verifying its digest
// and size.
func fetchLimited(ctx context.Context, repo Source, d ocispec.Descriptor, max int64) ([]byte, error) {
	if d.Size > max || d.Size < 0 {
		return nil, fmt.Errorf("%s: %d bytes is more than the %d expected", d.Digest, d.Size, max)
	}
	return content.FetchAll(ctx, repo, d)
}
