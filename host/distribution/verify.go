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
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
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

// ErrUntrusted: signatures were found but none verifies with a trusted
// key or identity.
var ErrUntrusted = errors.New("no signature verifies with a trusted key or identity")

// Trust is what a signature must verify with: a trusted key, or a
// certificate for a trusted identity that chains to Root.
type Trust struct {
	Keys []TrustedKey
	// Identities are the keyless signers (plugin_trust.identities);
	// they need Root.
	Identities []TrustedIdentity
	// Root is the pinned Sigstore trusted root (plugin_trust.trusted_root):
	// the Fulcio CAs, Rekor logs and timestamp authorities keyless
	// signatures are checked against, read from a file so that an
	// air-gapped host never fetches it.
	Root root.TrustedMaterial
}

// TrustedIdentity is a keyless signer the operator trusts: the OIDC
// issuer and the subject (the certificate's SAN) Fulcio certified.
type TrustedIdentity struct {
	// Name is how errors and the lock name it.
	Name   string
	Issuer string
	// Subject is the exact SAN, or SubjectRegexp a regular expression
	// the whole SAN must match (one of the two).
	Subject       string
	SubjectRegexp string
}

// Signer is who signed an artifact, as verified: a key, or a keyless
// identity.
type Signer struct {
	// Key is the trusted key's name, Fingerprint its fingerprint.
	Key         string `json:"key,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// Identity is the trusted identity's name; Issuer and Subject are
	// what the verified certificate says (the subject a regexp
	// matched, not the regexp).
	Identity string `json:"identity,omitempty"`
	Issuer   string `json:"issuer,omitempty"`
	Subject  string `json:"subject,omitempty"`
	// Via is how: "referrer" (Sigstore bundle) or "sig-tag" (cosign
	// simple signing).
	Via string `json:"via"`
}

// String names the signer for messages: the key's name, or "identity
// NAME (SUBJECT from ISSUER)".
func (s Signer) String() string {
	if s.Identity != "" || s.Subject != "" {
		return fmt.Sprintf("identity %s (%s from %s)", s.Identity, s.Subject, s.Issuer)
	}
	return s.Key
}

// same says whether s and o are one signer: the same key fingerprint, or
// the same certified issuer and subject (names may be renamed in the
// configuration).
func (s Signer) same(o Signer) bool {
	return s.Fingerprint == o.Fingerprint && s.Issuer == o.Issuer && s.Subject == o.Subject
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
// verifies with, or the trusted identity a keyless bundle was certified
// for. now is the time key validity is judged at (a keyless
// certificate's validity is judged at the time the transparency log or
// a timestamp authority observed the signature).
func VerifySignature(ctx context.Context, repo Source, desc ocispec.Descriptor, trust Trust, now time.Time) (Signer, error) {
	s, _, err := verifySignature(ctx, repo, desc, trust, now)
	return s, err
}

func verifySignature(ctx context.Context, repo Source, desc ocispec.Descriptor, trust Trust, now time.Time) (Signer, *Evidence, error) {
	if len(trust.Keys) == 0 && len(trust.Identities) == 0 {
		return Signer{}, nil, errors.New("no trusted keys or identities are configured (plugin_trust.keys, plugin_trust.identities)")
	}
	if len(trust.Identities) > 0 && trust.Root == nil {
		return Signer{}, nil, errors.New("trusted identities need a trusted root (plugin_trust.trusted_root)")
	}
	cands, err := findSignatures(ctx, repo, desc)
	if err != nil {
		return Signer{}, nil, err
	}
	if len(cands) == 0 {
		return Signer{}, nil, fmt.Errorf("%s: %w", desc.Digest, ErrUnsigned)
	}
	s, c, err := verifyCandidates(cands, desc, trust, now)
	if err != nil {
		return s, nil, err
	}
	return s, &Evidence{Bundle: c.bundle, Payload: c.payload, Signature: c.sig}, nil
}

func verifyCandidates(cands []candidate, desc ocispec.Descriptor, trust Trust, now time.Time) (Signer, candidate, error) {
	var why []string
	for _, c := range cands {
		if b, ok := certifiedBundle(c); ok {
			// A Fulcio certificate is the key: only identities can
			// verify it (and no key could).
			if len(trust.Identities) == 0 {
				why = append(why, fmt.Sprintf("%s signature: keyless (a certificate for %s), but no identity is trusted (plugin_trust.identities)", c.via, certSubject(b)))
			}
			for _, id := range trust.Identities {
				s, err := verifyKeyless(b, desc, id, trust.Root)
				if err == nil {
					s.Via = c.via
					return s, c, nil
				}
				why = append(why, fmt.Sprintf("%s signature with identity %s: %v", c.via, id.Name, err))
			}
			continue
		}
		if len(trust.Keys) == 0 {
			why = append(why, fmt.Sprintf("%s signature: by a key, but no key is trusted (plugin_trust.keys)", c.via))
		}
		for _, k := range trust.Keys {
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

// certifiedBundle is c's bundle when c is a Sigstore bundle whose
// verification material is a certificate (keyless signing).
func certifiedBundle(c candidate) (*bundle.Bundle, bool) {
	if c.via != "referrer" {
		return nil, false
	}
	var b bundle.Bundle
	if err := b.UnmarshalJSON(c.bundle); err != nil {
		return nil, false
	}
	vc, err := b.VerificationContent()
	if err != nil || vc.Certificate() == nil {
		return nil, false
	}
	return &b, true
}

// certSubject is a certificate's SAN and issuer for a message, unverified.
func certSubject(b *bundle.Bundle) string {
	vc, err := b.VerificationContent()
	if err != nil || vc.Certificate() == nil {
		return "?"
	}
	s, err := certificate.SummarizeCertificate(vc.Certificate())
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%s from %s", s.SubjectAlternativeName, s.Extensions.Issuer)
}

// verifyKeyless checks a keyless bundle through sigstore-go against the
// pinned trusted root: the certificate must chain to one of its Fulcio
// CAs, the signature must be in one of its Rekor logs (inclusion proof
// or signed entry timestamp) and observed while the certificate was
// valid (the log's signed time or a trusted timestamp: nothing is
// fetched, so this works air-gapped and keeps working once the
// short-lived certificate expired), the certificate must be for id, and
// the DSSE in-toto statement's subject must be desc's digest, as for a
// key-based bundle.
func verifyKeyless(b *bundle.Bundle, desc ocispec.Descriptor, id TrustedIdentity, tm root.TrustedMaterial) (Signer, error) {
	if tm == nil {
		return Signer{}, errors.New("no trusted root is configured (plugin_trust.trusted_root)")
	}
	if b.GetDsseEnvelope() == nil {
		return Signer{}, errors.New("bundle holds no DSSE envelope (an in-toto statement about the artifact is expected)")
	}
	v, err := verify.NewVerifier(tm, verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1))
	if err != nil {
		return Signer{}, err
	}
	sanRE := ""
	if id.SubjectRegexp != "" {
		// Anchored: a pattern for one repository's workflows must not
		// match a SAN that merely contains it.
		sanRE = "^(?:" + id.SubjectRegexp + ")$"
	}
	ci, err := verify.NewShortCertificateIdentity(id.Issuer, "", id.Subject, sanRE)
	if err != nil {
		return Signer{}, err
	}
	hexDigest, err := sha256Hex(desc.Digest.String())
	if err != nil {
		return Signer{}, err
	}
	raw, _ := hexDecode(hexDigest)
	res, err := v.Verify(b, verify.NewPolicy(verify.WithArtifactDigest("sha256", raw), verify.WithCertificateIdentity(ci)))
	if err != nil {
		return Signer{}, fmt.Errorf("%w (the certificate is for %s)", err, certSubject(b))
	}
	s := Signer{Identity: id.Name, Issuer: id.Issuer, Subject: id.Subject}
	if res.Signature != nil && res.Signature.Certificate != nil {
		s.Issuer = res.Signature.Certificate.Extensions.Issuer
		s.Subject = res.Signature.Certificate.SubjectAlternativeName
	}
	return s, nil
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
