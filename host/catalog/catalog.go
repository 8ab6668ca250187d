// Package catalog finds plugin binaries in the plugin directory and verifies
// them before each launch, in the manner of Vault's plugin catalog: a plugin
// is a name, a file and optionally a sha256 pin, and the file must pass the
// checks every time it is about to run, not only at startup, because the file
// can change underneath a running host.
package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Entry is a verified plugin binary.
type Entry struct {
	// Name is the file name in the plugin directory.
	Name string
	// Path is the absolute path that was verified.
	Path string
	// SHA256 is the hex digest of the file as it was read.
	SHA256 string
}

// Catalog is a plugin directory.
type Catalog struct {
	dir string
}

// New returns the catalog of dir (made absolute so launches do not depend
// on the working directory later).
func New(dir string) (*Catalog, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("plugin_dir %q: %w", dir, err)
	}
	return &Catalog{dir: abs}, nil
}

// Dir is the absolute plugin directory.
func (c *Catalog) Dir() string { return c.dir }

// Errors the checks return; wrapped with the path and details.
var (
	ErrNotFound      = errors.New("plugin not found")
	ErrSymlink       = errors.New("plugin is a symlink")
	ErrWorldWritable = errors.New("world-writable")
	ErrNotExecutable = errors.New("plugin is not an executable regular file")
	ErrHashMismatch  = errors.New("sha256 mismatch")
)

// List returns the names of candidate plugin files: regular files with an
// execute bit, and symlinks (so Verify can refuse them by name instead of
// them silently not being listed). Hidden files are ignored.
func (c *Catalog) List() ([]string, error) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("plugin_dir %s: %w", c.dir, err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 {
			out = append(out, e.Name())
			continue
		}
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			continue
		}
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out, nil
}

// Verify checks the named plugin and returns its entry: the directory must
// not be world-writable (anyone could swap the file), the file must be a
// regular executable file that is not a symlink and not world-writable, and
// when pin is non-empty its sha256 must equal pin. The hash is computed over
// the bytes on disk now; call Verify right before every launch.
func (c *Catalog) Verify(name, pin string) (Entry, error) {
	if name == "" || strings.ContainsRune(name, os.PathSeparator) || name == "." || name == ".." {
		return Entry{}, fmt.Errorf("plugin %q: not a plain file name", name)
	}
	dinfo, err := os.Stat(c.dir)
	if err != nil {
		return Entry{}, fmt.Errorf("plugin_dir %s: %w", c.dir, err)
	}
	if dinfo.Mode().Perm()&0o002 != 0 {
		return Entry{}, fmt.Errorf("plugin_dir %s is %w (mode %s): anyone could replace a plugin; chmod o-w it", c.dir, ErrWorldWritable, dinfo.Mode().Perm())
	}
	path := filepath.Join(c.dir, name)
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, fmt.Errorf("plugin %q: %w in %s", name, ErrNotFound, c.dir)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("plugin %q: %w", name, err)
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return Entry{}, fmt.Errorf("%w: %s -> %s; copy the binary into the plugin directory instead", ErrSymlink, path, target)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return Entry{}, fmt.Errorf("%w: %s (mode %s)", ErrNotExecutable, path, info.Mode())
	}
	if info.Mode().Perm()&0o002 != 0 {
		return Entry{}, fmt.Errorf("plugin %s is %w (mode %s): anyone could replace its code; chmod o-w it", path, ErrWorldWritable, info.Mode().Perm())
	}
	sum, err := hashFile(path)
	if err != nil {
		return Entry{}, fmt.Errorf("plugin %s: hash: %w", path, err)
	}
	if pin != "" && !strings.EqualFold(pin, sum) {
		return Entry{}, fmt.Errorf("plugin %s: %w: the file's sha256 is %s but the configured pin is %s; refusing to launch it (if the new binary is intended, update the pin)", path, ErrHashMismatch, sum, strings.ToLower(pin))
	}
	return Entry{Name: name, Path: path, SHA256: sum}, nil
}

func hashFile(path string) (string, error) {
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
