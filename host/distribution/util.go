package distribution

import (
	"crypto"
	"crypto/sha256"
	"encoding/hex"

	"oras.land/oras-go/v2/errdef"
)

const cryptoSHA256 = crypto.SHA256

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

func hexDecode(s string) ([]byte, error) { return hex.DecodeString(s) }

func errNotFound() error { return errdef.ErrNotFound }

// SHA256Hex is the hex sha256 of b.
func SHA256Hex(b []byte) string { return hex.EncodeToString(sha256Sum(b)) }
