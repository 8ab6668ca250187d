package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/filelock"
	"github.com/ffscan/ffscan/host/internal/ownership"
)

// Mode says what a launch does for a scanner with no recorded approval.
type Mode string

const (
	// FirstUse records the policy of a scanner's first launch as approved
	// (trust on first use, as ssh does with host keys); only later
	// widenings need the operator.
	FirstUse Mode = "first_use"
	// Required launches nothing the operator has not approved.
	Required Mode = "required"
)

// Record is the approval of one scanner's policy.
type Record struct {
	Policy Policy `json:"policy"`
	// Digest names Policy (Policy.Digest), for status and logs.
	Digest string `json:"digest"`
	// BinarySHA256 is the binary last launched under this approval.
	BinarySHA256 string `json:"binary_sha256"`
	// ApprovedSHA256 is the binary whose declaration was approved (the
	// one the operator reviewed, or the first one launched). Empty in
	// approvals recorded before it was kept.
	ApprovedSHA256 string    `json:"approved_sha256,omitempty"`
	ApprovedAt     time.Time `json:"approved_at"`
	// ApprovedBy is "first use" or "operator".
	ApprovedBy string `json:"approved_by"`
}

type file struct {
	Version  int               `json:"version"`
	Scanners map[string]Record `json:"scanners"`
}

// DefaultPath is where approvals live when plugin_approvals_file is not
// set: the user's configuration directory, ffscan/plugin-approvals.json.
func DefaultPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no default place for plugin approvals (%v): set plugin_approvals_file", err)
	}
	return filepath.Join(dir, "ffscan", "plugin-approvals.json"), nil
}

// Store is the approvals file. Safe for concurrent use, by this process
// (a mutex) and by other hosts sharing the file (an flock around each
// read-modify-write).
type Store struct {
	path string
	mode Mode
	now  func() time.Time
	mu   sync.Mutex
	// pending is what each scanner's last refused launch declared, for
	// status and the console (this process's launches only).
	pending map[string]Pending
}

// Pending is a declaration a launch refused, waiting for the operator.
type Pending struct {
	// SHA256 is the binary that declared it.
	SHA256 string
	Policy Policy
	// Digest names Policy.
	Digest string
	// Added is what it asks beyond the approval (Widening), or every
	// line when nothing was approved.
	Added []string
	At    time.Time
}

// NewStore returns the store at path (DefaultPath when empty).
func NewStore(path string, mode Mode) (*Store, error) {
	if path == "" {
		var err error
		if path, err = DefaultPath(); err != nil {
			return nil, err
		}
	}
	switch mode {
	case FirstUse, Required:
	default:
		return nil, fmt.Errorf("plugin approval mode %q is not one of first_use, required", mode)
	}
	return &Store{path: path, mode: mode, now: clock.Real().Now, pending: map[string]Pending{}}, nil
}

// Path is the approvals file.
func (s *Store) Path() string { return s.path }

// Mode is what a launch without an approval does.
func (s *Store) Mode() Mode { return s.mode }

// NotApprovedError refuses a scanner nobody approved (mode required).
type NotApprovedError struct {
	Scanner string
	Policy  Policy
	Path    string
}

func (e *NotApprovedError) Error() string {
	return fmt.Sprintf("scanner %s: its policy is not approved (plugin_approval is required; approvals in %s): it declares %s; "+
		"review it with `ffscan plugins verify`, approve it with `ffscan plugins approve %s`",
		e.Scanner, e.Path, strings.Join(e.Policy.Lines(), "; "), e.Scanner)
}

// WideningError refuses a binary that declares more than was approved.
type WideningError struct {
	Scanner  string
	Added    []string
	Approved Record
	Path     string
}

func (e *WideningError) Error() string {
	return fmt.Sprintf("scanner %s: the plugin declares more than its approved policy (%s, approved by %s on %s): %s; "+
		"refusing to launch it until the operator approves: review with `ffscan plugins verify`, approve with `ffscan plugins approve %s`, "+
		"then `ffscan plugins reload %s --force`",
		e.Scanner, e.Approved.Digest[:12], e.Approved.ApprovedBy, e.Approved.ApprovedAt.Format(time.DateOnly),
		strings.Join(e.Added, "; "), e.Scanner, e.Scanner)
}

// Decision is what Admit decided.
type Decision struct {
	// FirstUse says the policy was recorded now, with nobody's review.
	FirstUse bool
	Record   Record
}

// Admit decides whether a binary (binarySHA) may run scanner under policy
// p: yes when p is within the recorded approval (the record then names
// the binary); on first use, yes and recorded, in mode FirstUse; else a
// *NotApprovedError or *WideningError.
//
// An approval recorded before schedules were part of a policy covers the
// schedule of the binary that last ran under it (the same bytes declare
// the same schedule): Admit records it for that binary, and refuses any
// other binary until the operator approves.
func (s *Store) Admit(scanner, binarySHA string, p Policy) (Decision, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, fmt.Errorf("scanner %s: its policy cannot be approved: %w", scanner, err)
	}
	var dec Decision
	err := s.update(func(f *file) (bool, error) {
		rec, ok := f.Scanners[scanner]
		if !ok {
			if s.mode != FirstUse {
				s.setPending(scanner, binarySHA, p, p.Lines())
				return false, &NotApprovedError{Scanner: scanner, Policy: p, Path: s.path}
			}
			rec = Record{Policy: p, Digest: p.Digest(), BinarySHA256: binarySHA, ApprovedSHA256: binarySHA, ApprovedAt: s.now().UTC(), ApprovedBy: "first use"}
			f.Scanners[scanner] = rec
			dec = Decision{FirstUse: true, Record: rec}
			delete(s.pending, scanner)
			return true, nil
		}
		changed := false
		if rec.Policy.Schedule == nil && p.Schedule != nil && binarySHA == rec.BinarySHA256 && len(grantWidening(rec.Policy, p)) == 0 {
			rec.Policy.Schedule = p.Schedule
			rec.Digest = rec.Policy.Digest()
			changed = true
		}
		if added := Widening(rec.Policy, p); len(added) > 0 {
			s.setPending(scanner, binarySHA, p, added)
			return false, &WideningError{Scanner: scanner, Added: added, Approved: rec, Path: s.path}
		}
		changed = changed || rec.BinarySHA256 != binarySHA
		rec.BinarySHA256 = binarySHA
		f.Scanners[scanner] = rec
		dec = Decision{Record: rec}
		delete(s.pending, scanner)
		return changed, nil
	})
	return dec, err
}

// setPending records a refused declaration; s.mu is held.
func (s *Store) setPending(scanner, binarySHA string, p Policy, added []string) {
	s.pending[scanner] = Pending{SHA256: binarySHA, Policy: p, Digest: p.Digest(), Added: added, At: s.now().UTC()}
}

// PendingFor returns the declaration scanner's last launch was refused
// for, if it is still waiting.
func (s *Store) PendingFor(scanner string) (Pending, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pending[scanner]
	return p, ok
}

// Approve records p as scanner's approved policy (the operator's
// decision), replacing any earlier approval.
func (s *Store) Approve(scanner, binarySHA string, p Policy) (Record, error) {
	if err := p.Validate(); err != nil {
		return Record{}, fmt.Errorf("scanner %s: its policy cannot be approved: %w", scanner, err)
	}
	rec := Record{Policy: p, Digest: p.Digest(), BinarySHA256: binarySHA, ApprovedSHA256: binarySHA, ApprovedAt: s.now().UTC(), ApprovedBy: "operator"}
	err := s.update(func(f *file) (bool, error) {
		f.Scanners[scanner] = rec
		if pend, ok := s.pending[scanner]; ok && len(Widening(p, pend.Policy)) == 0 {
			delete(s.pending, scanner)
		}
		return true, nil
	})
	return rec, err
}

// Lookup returns scanner's approval, if any.
func (s *Store) Lookup(scanner string) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.read()
	if err != nil {
		return Record{}, false, err
	}
	rec, ok := f.Scanners[scanner]
	return rec, ok, nil
}

// All returns every recorded approval, by scanner.
func (s *Store) All() (map[string]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := s.read()
	if err != nil {
		return nil, err
	}
	return f.Scanners, nil
}

// update runs fn on the file's contents under both locks and writes them
// back when fn says it changed them.
func (s *Store) update(fn func(*file) (bool, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("plugin approvals: %w", err)
	}
	unlock, err := filelock.File(s.path + ".lock")
	if err != nil {
		return fmt.Errorf("plugin approvals: lock %s: %w", s.path+".lock", err)
	}
	defer unlock()
	f, err := s.read()
	if err != nil {
		return err
	}
	changed, err := fn(f)
	if err != nil || !changed {
		return err
	}
	return s.write(f)
}

func (s *Store) read() (*file, error) {
	f := &file{Version: 1, Scanners: map[string]Record{}}
	fi, err := os.Lstat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin approvals: %w", err)
	}
	// Whoever can write this file can approve any plugin: it must be a
	// regular file only its owner (this user) may change.
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("plugin approvals: %s is not a regular file", s.path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("plugin approvals: %s is writable by group or others (mode %v); chmod go-w it", s.path, fi.Mode().Perm())
	}
	if err := ownership.OwnedByMe(fi); err != nil {
		return nil, fmt.Errorf("plugin approvals: %s: %w", s.path, err)
	}
	raw, err := os.ReadFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("plugin approvals: %w", err)
	}
	if err := json.Unmarshal(raw, f); err != nil {
		return nil, fmt.Errorf("plugin approvals: %s is not valid: %w (fix or remove it; removing it forgets every approval)", s.path, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("plugin approvals: %s has version %d; this ffscan reads version 1", s.path, f.Version)
	}
	if f.Scanners == nil {
		f.Scanners = map[string]Record{}
	}
	for name, rec := range f.Scanners {
		if err := rec.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("plugin approvals: %s: scanner %s: %w (fix or remove its record)", s.path, name, err)
		}
	}
	return f, nil
}

// write replaces the file atomically (a reader never sees half of it).
func (s *Store) write(f *file) error {
	raw, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), "."+filepath.Base(s.path)+".*")
	if err != nil {
		return fmt.Errorf("plugin approvals: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("plugin approvals: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("plugin approvals: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("plugin approvals: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("plugin approvals: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("plugin approvals: %w", err)
	}
	return nil
}
