// Package admintoken keeps the secret that authenticates requests to the
// host's admin endpoints: a random token in a file only its owner can
// read, created by the host at its first start with admin on, read by the
// CLI (`ffscan reload`, `ffscan plugins reload`) run by the same user.
//
// A header any client can set (what the endpoints asked for before) stops
// a browser page but not another local user or anything that reaches the
// port; the token does, as long as the file stays private. The file is
// refused when anyone but its owner may read or write it, when it is not
// a regular file, or when another user owns it.
package admintoken

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ffscan/ffscan/host/internal/ownership"
)

// DefaultPath is where the token lives when http.admin_token_file is not
// set: the user's configuration directory ($XDG_CONFIG_HOME or
// ~/.config), ffscan/admin-token.
func DefaultPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no default place for the admin token (%v): set http.admin_token_file", err)
	}
	return filepath.Join(dir, "ffscan", "admin-token"), nil
}

// Resolve returns path, or DefaultPath when it is empty.
func Resolve(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	return DefaultPath()
}

// Ensure returns the token stored at path, creating the file (and its
// directory, 0700) with a fresh token, mode 0600, when it does not exist.
// created says it did.
func Ensure(path string) (token string, created bool, err error) {
	tok, err := Read(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	tok = hex.EncodeToString(raw)
	// The token is written whole to a file of its own, then linked to
	// its name: a link never replaces an existing file, so two hosts
	// starting at once do not overwrite each other's token (the loser
	// reads the winner's), and a reader never sees a file that exists but
	// is not written yet (creating the name first, then writing, showed
	// an empty token to a host starting at that moment).
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	if _, err := tmp.WriteString(tok + "\n"); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("admin token: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", false, fmt.Errorf("admin token: write %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			tok, err = Read(path)
			return tok, false, err
		}
		return "", false, fmt.Errorf("admin token: %w", err)
	}
	return tok, true, nil
}

// Read returns the token stored at path after checking that the file is
// private to the current user. A missing file is an error wrapping
// fs.ErrNotExist.
func Read(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("admin token: %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("admin token: %s has mode %04o: others may read it; chmod 600 %s", path, perm, path)
	}
	if err := ownership.OwnedByMe(fi); err != nil {
		return "", fmt.Errorf("admin token: %s: %w", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 {
		return "", fmt.Errorf("admin token: %s holds %d characters; at least 32 are needed (delete it and the host writes a new one)", path, len(tok))
	}
	return tok, nil
}

// Equal compares a presented token with the expected one in constant
// time; an empty expected token matches nothing.
func Equal(presented, expected string) bool {
	if expected == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(presented), []byte(expected)) == 1
}
