package distribution

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// TrustedKey is a public key the operator trusts to sign plugins
// (plugin_trust.keys).
type TrustedKey struct {
	// Name is how errors and the lock name it (default: its file).
	Name string
	// Key is an ECDSA P-256 public key (cosign's key type).
	Key *ecdsa.PublicKey
	// NotBefore and NotAfter bound when the key may verify (zero: no
	// bound); checked against the current time.
	NotBefore, NotAfter time.Time
}

// Fingerprint is "sha256:" and the hex SHA-256 of the key's DER
// SubjectPublicKeyInfo: the signer the lock records.
func Fingerprint(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// LoadPublicKey reads a PEM "PUBLIC KEY" (cosign.pub's format).
func LoadPublicKey(path string) (*ecdsa.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePublicKey(b)
}

// ParsePublicKey decodes a PEM ECDSA P-256 public key.
func ParsePublicKey(b []byte) (*ecdsa.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM PUBLIC KEY")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PublicKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, errors.New("not an ECDSA P-256 public key (cosign's key type)")
	}
	return ek, nil
}

// LoadPrivateKey reads an unencrypted PEM ECDSA P-256 private key
// (PKCS#8 "PRIVATE KEY" or SEC 1 "EC PRIVATE KEY"). cosign's encrypted
// key format is not read: export the key, or sign with cosign itself.
func LoadPrivateKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	var k any
	switch blk.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("%s: PEM %q is not an unencrypted private key (PRIVATE KEY or EC PRIVATE KEY)", path, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: not an ECDSA P-256 key", path)
	}
	return ek, nil
}

// MarshalPrivateKey and MarshalPublicKey write keys as PEM (PKCS#8,
// PKIX).
func MarshalPrivateKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func MarshalPublicKey(k *ecdsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
