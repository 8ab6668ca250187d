package distribution

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/sign"
)

// keypair is sigstore-go's signing interface over the publisher's key.
type keypair struct{ k *ecdsa.PrivateKey }

func (kp keypair) GetHashAlgorithm() protocommon.HashAlgorithm {
	return protocommon.HashAlgorithm_SHA2_256
}
func (kp keypair) GetSigningAlgorithm() protocommon.PublicKeyDetails {
	return protocommon.PublicKeyDetails_PKIX_ECDSA_P256_SHA_256
}
func (kp keypair) GetHint() []byte                { return []byte(Fingerprint(&kp.k.PublicKey)) }
func (kp keypair) GetKeyAlgorithm() string        { return "ECDSA" }
func (kp keypair) GetPublicKey() crypto.PublicKey { return &kp.k.PublicKey }
func (kp keypair) GetPublicKeyPem() (string, error) {
	b, err := MarshalPublicKey(&kp.k.PublicKey)
	return string(b), err
}
func (kp keypair) SignData(_ context.Context, data []byte) ([]byte, []byte, error) {
	sum := sha256.Sum256(data)
	sig, err := ecdsa.SignASN1(rand.Reader, kp.k, sum[:])
	return sig, sum[:], err
}

// inTotoStatement is the DSSE payload cosign's new bundle format signs
// for an image: a statement whose subject is the manifest digest.
type inTotoStatement struct {
	Type          string          `json:"_type"`
	Subject       []inTotoSubject `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     map[string]any  `json:"predicate"`
}

type inTotoSubject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// SignBundle is a Sigstore bundle (v0.3, key-based: no certificate, no
// transparency log) over an in-toto statement naming digest ("sha256:…")
// of the artifact at repo.
func SignBundle(k *ecdsa.PrivateKey, repo, digest string) ([]byte, error) {
	hexDigest, err := sha256Hex(digest)
	if err != nil {
		return nil, err
	}
	st, err := json.Marshal(inTotoStatement{
		Type:          "https://in-toto.io/Statement/v1",
		Subject:       []inTotoSubject{{Name: repo, Digest: map[string]string{"sha256": hexDigest}}},
		PredicateType: "https://sigstore.dev/cosign/sign/v1",
		Predicate:     map[string]any{},
	})
	if err != nil {
		return nil, err
	}
	pb, err := sign.Bundle(&sign.DSSEData{Data: st, PayloadType: "application/vnd.in-toto+json"}, keypair{k}, sign.BundleOptions{})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	b, err := bundle.NewBundle(pb)
	if err != nil {
		return nil, err
	}
	return b.MarshalJSON()
}

// simpleSigning is cosign's legacy signature payload.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// SignSimple is cosign's legacy signature of digest at repo: the
// simple-signing payload and its base64 ECDSA signature (the layer and
// the annotation of a ".sig" tag's manifest).
func SignSimple(k *ecdsa.PrivateKey, repo, digest string) (payload []byte, sigB64 string, err error) {
	var p simpleSigning
	p.Critical.Identity.DockerReference = repo
	p.Critical.Image.DockerManifestDigest = digest
	p.Critical.Type = "cosign container image signature"
	payload, err = json.Marshal(p)
	if err != nil {
		return nil, "", err
	}
	sig, _, err := keypair{k}.SignData(context.Background(), payload)
	if err != nil {
		return nil, "", err
	}
	return payload, base64.StdEncoding.EncodeToString(sig), nil
}

// sha256Hex is the hex part of a "sha256:…" digest.
func sha256Hex(digest string) (string, error) {
	const pre = "sha256:"
	if len(digest) != len(pre)+64 || digest[:len(pre)] != pre {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex>", digest)
	}
	if _, err := hex.DecodeString(digest[len(pre):]); err != nil {
		return "", fmt.Errorf("digest %q: %w", digest, err)
	}
	return digest[len(pre):], nil
}
