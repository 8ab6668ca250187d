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
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Entry is a verified plugin binary.
type Entry struct {
	// Name is the file name in the plugin directory.
	Name string
	// Path is the absolute path that was verified.
	Path string
	// SHA256 is the hex digest of the file as it was read.
	SHA256 string
	// ExecPath, set by Stage, is a private copy of exactly the bytes that
	// were hashed: what a launch executes.
	ExecPath string
}

// Catalog is a plugin directory.
type Catalog struct {
	dir string

	mu    sync.Mutex
	stage string // private directory of staged copies; made on first Stage
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
	ErrGroupWritable = errors.New("group-writable")
	ErrForeignOwner  = errors.New("owned by another user")
	ErrNotExecutable = errors.New("plugin is not an executable regular file")
	ErrHashMismatch  = errors.New("sha256 mismatch")
)

// renamed maps the binary names ffscan's own plugins had before to their
// names now (the scanners they serve kept their names). A configuration
// that still names an old binary is refused with the new name in the
// error rather than only "not found".
var renamed = map[string]string{
	"dependencyreconciler": "depreconciler",
	"retentiontrimmer":     "retention",
}

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
	path, err := c.check(name)
	if err != nil {
		return Entry{}, err
	}
	sum, err := hashFile(path)
	if err != nil {
		return Entry{}, fmt.Errorf("plugin %s: hash: %w", path, err)
	}
	if err := checkPin(path, pin, sum); err != nil {
		return Entry{}, err
	}
	return Entry{Name: name, Path: path, SHA256: sum}, nil
}

func checkPin(path, pin, sum string) error {
	if pin != "" && !strings.EqualFold(pin, sum) {
		return fmt.Errorf("plugin %s: %w: the file's sha256 is %s but the configured pin is %s; refusing to launch it (if the new binary is intended, update the pin)", path, ErrHashMismatch, sum, strings.ToLower(pin))
	}
	return nil
}

// Stage is Verify for a launch: it reads the file once, hashes and checks
// those bytes, and copies them into a directory private to this catalog
// (content-addressed, 0700), returning the copy as ExecPath. Executing
// ExecPath runs exactly what was verified: replacing the file in
// plugin_dir between the check and the exec (a race Verify-then-exec
// leaves open) changes nothing. Close removes the copies.
func (c *Catalog) Stage(name, pin string) (Entry, error) {
	path, err := c.check(name)
	if err != nil {
		return Entry{}, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return Entry{}, fmt.Errorf("plugin %s: %w", path, err)
	}
	defer f.Close()
	// The checks again, on the file actually opened (it may have been
	// replaced since check looked at the name).
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 || info.Mode().Perm()&0o002 != 0 {
		return Entry{}, fmt.Errorf("%w: %s changed while it was being checked", ErrNotExecutable, path)
	}
	if err := ownedByUsOrRoot("plugin "+path, info); err != nil {
		return Entry{}, err
	}
	body, err := io.ReadAll(f)
	if err != nil {
		return Entry{}, fmt.Errorf("plugin %s: read: %w", path, err)
	}
	h := sha256.Sum256(body)
	sum := hex.EncodeToString(h[:])
	if err := checkPin(path, pin, sum); err != nil {
		return Entry{}, err
	}
	dir, err := c.stageDir()
	if err != nil {
		return Entry{}, err
	}
	exec := filepath.Join(dir, sum[:16]+"-"+name)
	if err := writeStaged(exec, body, sum); err != nil {
		return Entry{}, fmt.Errorf("plugin %s: stage a private copy: %w", path, err)
	}
	return Entry{Name: name, Path: path, SHA256: sum, ExecPath: exec}, nil
}

// StageExact is Stage for a launch that must run the bytes whose sha256
// is exact (a scanner held at the version it runs while a canary of the
// file now in plugin_dir is compared with it): the private copy made when
// those bytes were staged, if it is still there and still hashes to
// exact, else the file in plugin_dir if it holds them. Anything else is
// refused: the bytes asked for are no longer available.
func (c *Catalog) StageExact(name, pin, exact string) (Entry, error) {
	path, err := c.check(name)
	if err != nil {
		return Entry{}, err
	}
	if len(exact) == 64 {
		if dir, err := c.stageDir(); err == nil {
			staged := filepath.Join(dir, exact[:16]+"-"+name)
			if have, err := hashFile(staged); err == nil && have == exact {
				if err := checkPin(path, pin, exact); err != nil {
					return Entry{}, err
				}
				return Entry{Name: name, Path: path, SHA256: exact, ExecPath: staged}, nil
			}
		}
	}
	e, err := c.Stage(name, pin)
	if err != nil {
		return Entry{}, err
	}
	if e.SHA256 != exact {
		return Entry{}, fmt.Errorf("plugin %s: it now holds sha256 %.12s, not %.12s, which this scanner is held at (a canary of the file was compared with it), and no private copy of those bytes is left", path, e.SHA256, exact)
	}
	return e, nil
}

// writeStaged puts body at path unless a copy with the same contents is
// already there; it replaces the file atomically so a running plugin's
// executable is never written to.
func writeStaged(path string, body []byte, sum string) error {
	if have, err := hashFile(path); err == nil && have == sum {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".stage-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(body)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o500)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (c *Catalog) stageDir() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stage == "" {
		sweepStaged()
		d, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", stagePrefix, os.Getpid()))
		if err != nil {
			return "", fmt.Errorf("private plugin copies: %w", err)
		}
		c.stage = d // MkdirTemp makes it 0700
	}
	return c.stage, nil
}

// stagePrefix starts the name of every staging directory, followed by the
// pid of the process that made it.
const stagePrefix = "ffscan-exec-"

// sweepStaged removes the staging directories of processes that are gone
// without closing their catalog (a host killed with SIGKILL), so copies
// of plugin binaries do not pile up in the temporary directory. Only
// directories of this user whose process no longer exists are touched.
func sweepStaged() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), stagePrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), stagePrefix)
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		var st syscall.Stat_t
		if syscall.Lstat(d, &st) != nil || int(st.Uid) != os.Getuid() || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// Close removes the staged copies. Running plugins keep running (their
// executables stay open); the catalog stages anew if used again.
func (c *Catalog) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stage == "" {
		return nil
	}
	err := os.RemoveAll(c.stage)
	c.stage = ""
	return err
}

// check runs the checks on the name and the file's metadata and returns
// its path.
func (c *Catalog) check(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, os.PathSeparator) || name == "." || name == ".." {
		return "", fmt.Errorf("plugin %q: not a plain file name", name)
	}
	dinfo, err := os.Stat(c.dir)
	if err != nil {
		return "", fmt.Errorf("plugin_dir %s: %w", c.dir, err)
	}
	if dinfo.Mode().Perm()&0o002 != 0 {
		return "", fmt.Errorf("plugin_dir %s is %w (mode %s): anyone could replace a plugin; chmod o-w it", c.dir, ErrWorldWritable, dinfo.Mode().Perm())
	}
	if dinfo.Mode().Perm()&0o020 != 0 {
		return "", fmt.Errorf("plugin_dir %s is %w (mode %s): members of its group could replace a plugin; chmod g-w it", c.dir, ErrGroupWritable, dinfo.Mode().Perm())
	}
	if err := ownedByUsOrRoot("plugin_dir "+c.dir, dinfo); err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, name)
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if now, ok := renamed[name]; ok {
			return "", fmt.Errorf("plugin %q: %w in %s: ffscan's plugin %s is now named %s; name %q in the scanner's plugin setting, or leave it empty to use the binary that declares the scanner", name, ErrNotFound, c.dir, name, now, now)
		}
		return "", fmt.Errorf("plugin %q: %w in %s", name, ErrNotFound, c.dir)
	}
	if err != nil {
		return "", fmt.Errorf("plugin %q: %w", name, err)
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return "", fmt.Errorf("%w: %s -> %s; copy the binary into the plugin directory instead", ErrSymlink, path, target)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s (mode %s)", ErrNotExecutable, path, info.Mode())
	}
	if info.Mode().Perm()&0o002 != 0 {
		return "", fmt.Errorf("plugin %s is %w (mode %s): anyone could replace its code; chmod o-w it", path, ErrWorldWritable, info.Mode().Perm())
	}
	if info.Mode().Perm()&0o020 != 0 {
		return "", fmt.Errorf("plugin %s is %w (mode %s): members of its group could replace its code; chmod g-w it", path, ErrGroupWritable, info.Mode().Perm())
	}
	if err := ownedByUsOrRoot("plugin "+path, info); err != nil {
		return "", err
	}
	return path, nil
}

// ownedByUsOrRoot refuses a file or directory owned by a user other than
// the host's own or root: that user could replace the code the host runs.
func ownedByUsOrRoot(what string, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // not a Unix file system: nothing to compare
	}
	if uid := int(st.Uid); uid != 0 && uid != os.Getuid() {
		return fmt.Errorf("%s is %w (uid %d): only this user (uid %d) or root may own plugins, since the owner could replace their code; chown it", what, ErrForeignOwner, uid, os.Getuid())
	}
	return nil
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
