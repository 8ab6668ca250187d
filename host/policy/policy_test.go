package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

var leaseInfo = scannerapi.Info{
	Name:   "lease_expiry",
	Family: keys.FamilyFlow, DefaultBatch: 50,
	Sources:   []scannerapi.CandidateSource{{Name: "due", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lease_expiry", Backlog: scannerapi.BacklogDue}},
	Commands:  []string{"HGET", "ZREM", "ZRANGE"},
	Functions: []string{"ff_mark_lease_expired_if_due"},
	KeyScopes: []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{"ff:idx:{fp:*}:lease_expiry"}}},
	FunctionScopes: []scannerapi.FunctionScope{{Function: "ff_mark_lease_expired_if_due",
		Patterns: []string{"ff:idx:{fp:*}:lease_expiry", "ff:exec:{fp:*}:*:core"}}},
}

func TestLinesAndDigestAreCanonical(t *testing.T) {
	p := FromInfo(leaseInfo)
	assert.Equal(t, []string{
		"HGET (any ff: key)",
		"ZRANGE (any ff: key)",
		"ZREM ff:idx:{fp:*}:lease_expiry",
		"FCALL ff_mark_lease_expired_if_due writes ff:exec:{fp:*}:*:core ff:idx:{fp:*}:lease_expiry",
		"FAMILY flow",
		"SOURCE due: zset_due ff:idx:{p}:lease_expiry backlog due",
		"BATCH 50",
	}, p.Lines())
	reordered := leaseInfo
	reordered.Commands = []string{"zrange", "ZREM", "HGET", "HGET"}
	assert.Equal(t, p.Digest(), FromInfo(reordered).Digest(), "order, case and repeats do not change a policy")
	assert.Empty(t, p.UnscopedWrites())

	wide := leaseInfo
	wide.Commands = append([]string{"DEL"}, leaseInfo.Commands...)
	assert.Equal(t, []string{"DEL"}, FromInfo(wide).UnscopedWrites())
	assert.Contains(t, FromInfo(wide).Lines(), "DEL (any ff: key: an unscoped write)")

	// A library function is a write: unscoped, it is flagged as one.
	fn := leaseInfo
	fn.FunctionScopes = nil
	assert.Equal(t, []string{"FCALL ff_mark_lease_expired_if_due"}, FromInfo(fn).UnscopedWrites())
	assert.Contains(t, FromInfo(fn).Lines(), "FCALL ff_mark_lease_expired_if_due (any ff: key: an unscoped write)")
}

func TestWidening(t *testing.T) {
	approved := FromInfo(leaseInfo)
	mutate := func(fn func(*scannerapi.Info)) Policy {
		in := leaseInfo
		in.Commands = append([]string(nil), leaseInfo.Commands...)
		in.Functions = append([]string(nil), leaseInfo.Functions...)
		in.KeyScopes = []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{"ff:idx:{fp:*}:lease_expiry"}}}
		in.FunctionScopes = []scannerapi.FunctionScope{{Function: "ff_mark_lease_expired_if_due",
			Patterns: []string{"ff:idx:{fp:*}:lease_expiry", "ff:exec:{fp:*}:*:core"}}}
		fn(&in)
		return FromInfo(in)
	}
	assert.Empty(t, Widening(approved, approved))
	assert.Empty(t, Widening(approved, mutate(func(in *scannerapi.Info) { in.Commands = []string{"ZREM"} })), "narrower")
	assert.Equal(t, []string{"+ DEL (any ff: key)"},
		Widening(approved, mutate(func(in *scannerapi.Info) { in.Commands = append(in.Commands, "DEL") })))
	assert.Equal(t, []string{"+ ZREM (any ff: key; approved only for ff:idx:{fp:*}:lease_expiry)"},
		Widening(approved, mutate(func(in *scannerapi.Info) { in.KeyScopes = nil })))
	assert.Equal(t, []string{"+ ZREM ff:exec:*"},
		Widening(approved, mutate(func(in *scannerapi.Info) { in.KeyScopes[0].Patterns = append(in.KeyScopes[0].Patterns, "ff:exec:*") })))
	assert.Equal(t, []string{"+ FCALL ff_cancel_execution (any ff: key)"},
		Widening(approved, mutate(func(in *scannerapi.Info) { in.Functions = append(in.Functions, "ff_cancel_execution") })))
	assert.Equal(t, []string{"+ FCALL ff_mark_lease_expired_if_due (any ff: key; approved only for ff:exec:{fp:*}:*:core ff:idx:{fp:*}:lease_expiry)"},
		Widening(approved, mutate(func(in *scannerapi.Info) { in.FunctionScopes = nil })))
	assert.Equal(t, []string{"+ FCALL ff_mark_lease_expired_if_due ff:worker:*"},
		Widening(approved, mutate(func(in *scannerapi.Info) {
			in.FunctionScopes[0].Patterns = append(in.FunctionScopes[0].Patterns, "ff:worker:*")
		})))
	// Scoping a command or a function that was approved unscoped (an
	// approval from before function scopes) narrows it.
	unscoped := mutate(func(in *scannerapi.Info) { in.KeyScopes, in.FunctionScopes = nil, nil })
	assert.Empty(t, Widening(unscoped, approved))
}

func newStore(t *testing.T, mode Mode) *Store {
	t.Helper()
	s, err := NewStore(filepath.Join(t.TempDir(), "sub", "approvals.json"), mode)
	require.NoError(t, err)
	return s
}

func TestFirstUseRecordsThenGuards(t *testing.T) {
	s := newStore(t, FirstUse)
	p := FromInfo(leaseInfo)
	dec, err := s.Admit("lease_expiry", "sha-a", p)
	require.NoError(t, err)
	assert.True(t, dec.FirstUse)
	assert.Equal(t, "first use", dec.Record.ApprovedBy)
	fi, err := os.Stat(s.Path())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(s.Path()))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	// The same or a narrower policy from another binary: admitted, and
	// the record names the binary.
	narrow := leaseInfo
	narrow.Commands = []string{"ZREM"}
	dec, err = s.Admit("lease_expiry", "sha-b", FromInfo(narrow))
	require.NoError(t, err)
	assert.False(t, dec.FirstUse)
	rec, ok, err := s.Lookup("lease_expiry")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "sha-b", rec.BinarySHA256)
	assert.Equal(t, p.Digest(), rec.Digest, "the approval keeps the policy approved, not the narrower one")

	// Wider: refused, saying what it adds and how to approve.
	wide := leaseInfo
	wide.Commands = append([]string{"DEL"}, leaseInfo.Commands...)
	_, err = s.Admit("lease_expiry", "sha-c", FromInfo(wide))
	var we *WideningError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, []string{"+ DEL (any ff: key)"}, we.Added)
	assert.Contains(t, err.Error(), "ffscan plugins approve lease_expiry")
	rec, _, err = s.Lookup("lease_expiry")
	require.NoError(t, err)
	assert.Equal(t, "sha-b", rec.BinarySHA256, "a refused binary is not recorded")

	// Approved by the operator: admitted from then on.
	_, err = s.Approve("lease_expiry", "sha-c", FromInfo(wide))
	require.NoError(t, err)
	_, err = s.Admit("lease_expiry", "sha-c", FromInfo(wide))
	require.NoError(t, err)
	rec, _, err = s.Lookup("lease_expiry")
	require.NoError(t, err)
	assert.Equal(t, "operator", rec.ApprovedBy)
}

func TestRequiredRefusesTheUnapproved(t *testing.T) {
	s := newStore(t, Required)
	_, err := s.Admit("lease_expiry", "sha-a", FromInfo(leaseInfo))
	var ne *NotApprovedError
	require.ErrorAs(t, err, &ne)
	assert.Contains(t, err.Error(), "ZREM ff:idx:{fp:*}:lease_expiry")
	_, ok, err := s.Lookup("lease_expiry")
	require.NoError(t, err)
	assert.False(t, ok, "nothing recorded")
	_, err = s.Approve("lease_expiry", "sha-a", FromInfo(leaseInfo))
	require.NoError(t, err)
	_, err = s.Admit("lease_expiry", "sha-a", FromInfo(leaseInfo))
	require.NoError(t, err)
}

// Whoever can write the file can approve anything: a file others may
// write, or garbage, stops every launch instead of being trusted or
// silently replaced.
func TestUnsafeOrBrokenFilesAreRefused(t *testing.T) {
	s := newStore(t, FirstUse)
	_, err := s.Admit("lease_expiry", "sha-a", FromInfo(leaseInfo))
	require.NoError(t, err)
	require.NoError(t, os.Chmod(s.Path(), 0o666))
	_, err = s.Admit("lease_expiry", "sha-a", FromInfo(leaseInfo))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "writable by group or others")

	require.NoError(t, os.WriteFile(s.Path(), []byte("{not json"), 0o600))
	require.NoError(t, os.Chmod(s.Path(), 0o600))
	_, err = s.Admit("lease_expiry", "sha-a", FromInfo(leaseInfo))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not valid")
	raw, rerr := os.ReadFile(s.Path())
	require.NoError(t, rerr)
	assert.Equal(t, "{not json", string(raw), "left as it was")
}

func TestConcurrentFirstUsesAreAllKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "approvals.json")
	// Two stores on one file stand for two host processes (the flock);
	// each is also used from several goroutines (the mutex).
	a, err := NewStore(path, FirstUse)
	require.NoError(t, err)
	b, err := NewStore(path, FirstUse)
	require.NoError(t, err)
	names := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, n := range names {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Admit(n, "sha", FromInfo(leaseInfo))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, n := range names {
		_, ok, err := a.Lookup(n)
		require.NoError(t, err)
		assert.True(t, ok, n)
	}
}

func TestBadMode(t *testing.T) {
	_, err := NewStore("x", "sometimes")
	require.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrNotExist))
	assert.Contains(t, err.Error(), "first_use, required")
}

// A policy's patterns are bounded at approval, as at declaration: one
// from an edited approvals file or a caller that skipped the Info's
// validation is refused.
func TestApprovalBoundsPatterns(t *testing.T) {
	s := newStore(t, FirstUse)
	long := FromInfo(leaseInfo)
	long.Commands["ZREM"] = []string{"ff:" + strings.Repeat("*a", 50_000)}
	_, err := s.Admit("lease_expiry", "sha", long)
	require.ErrorContains(t, err, "a key pattern of 100003 bytes")
	_, err = s.Approve("lease_expiry", "sha", long)
	require.ErrorContains(t, err, "at most 512")

	// An approvals file holding one is refused whole, saying which.
	_, err = s.Admit("lease_expiry", "sha", FromInfo(leaseInfo))
	require.NoError(t, err)
	raw, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	edited := strings.Replace(string(raw), "ff:idx:{fp:*}:lease_expiry", "ff:"+strings.Repeat("x", 600), 1)
	require.NoError(t, os.WriteFile(s.Path(), []byte(edited), 0o600))
	_, _, err = s.Lookup("lease_expiry")
	require.ErrorContains(t, err, "scanner lease_expiry: ZREM has a key pattern of 603 bytes")
}

// What the host reads for a scanner is part of its policy: any change of
// family, sources or batch needs the operator, a narrower one included
// (there is no "narrower" schedule), and names what changed.
func TestScheduleChangesNeedApproval(t *testing.T) {
	approved := FromInfo(leaseInfo)
	batch := leaseInfo
	batch.DefaultBatch = 5000
	assert.Equal(t, []string{"~ BATCH 5000 (approved: 50)"}, Widening(approved, FromInfo(batch)))
	small := leaseInfo
	small.DefaultBatch = 10
	assert.Equal(t, []string{"~ BATCH 10 (approved: 50)"}, Widening(approved, FromInfo(small)))
	src := leaseInfo
	src.Sources = []scannerapi.CandidateSource{{Name: "due", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lease_expiry", Backlog: scannerapi.BacklogDue},
		{Name: "more", Kind: scannerapi.SourceSetScan, Key: "ff:idx:{p}:other"}}
	assert.Equal(t, []string{"+ SOURCE more: set_scan ff:idx:{p}:other"}, Widening(approved, FromInfo(src)))
	moved := leaseInfo
	moved.Sources = []scannerapi.CandidateSource{{Name: "due", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lease_expiry", ScoreOffset: -time.Hour, Backlog: scannerapi.BacklogDue}}
	assert.Equal(t, []string{"+ SOURCE due: zset_due ff:idx:{p}:lease_expiry offset -1h0m0s backlog due", "- SOURCE due: zset_due ff:idx:{p}:lease_expiry backlog due"},
		Widening(approved, FromInfo(moved)))
	fam := leaseInfo
	fam.Family = keys.FamilyBudget
	assert.Equal(t, []string{"~ FAMILY budget (approved: flow)"}, Widening(approved, FromInfo(fam)))
	assert.NotEqual(t, approved.Digest(), FromInfo(batch).Digest(), "the digest covers the schedule")

	s := newStore(t, FirstUse)
	_, err := s.Admit("lease_expiry", "sha-a", approved)
	require.NoError(t, err)
	_, err = s.Admit("lease_expiry", "sha-b", FromInfo(batch))
	var we *WideningError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, []string{"~ BATCH 5000 (approved: 50)"}, we.Added)
	pend, ok := s.PendingFor("lease_expiry")
	require.True(t, ok, "the refused declaration waits for the operator")
	assert.Equal(t, "sha-b", pend.SHA256)
	assert.Equal(t, FromInfo(batch).Digest(), pend.Digest)
	assert.Equal(t, we.Added, pend.Added)

	rec, err := s.Approve("lease_expiry", "sha-b", FromInfo(batch))
	require.NoError(t, err)
	assert.Equal(t, "sha-b", rec.ApprovedSHA256)
	_, ok = s.PendingFor("lease_expiry")
	assert.False(t, ok, "approved: nothing pending")
	_, err = s.Admit("lease_expiry", "sha-b", FromInfo(batch))
	require.NoError(t, err)
}

// An approval recorded before schedules were part of a policy covers the
// schedule of the binary that last ran under it, and no other binary's.
func TestApprovalFromBeforeSchedules(t *testing.T) {
	s := newStore(t, Required)
	old := FromInfo(leaseInfo)
	old.Schedule = nil
	_, err := s.Approve("lease_expiry", "sha-a", old)
	require.NoError(t, err)

	_, err = s.Admit("lease_expiry", "sha-b", FromInfo(leaseInfo))
	var we *WideningError
	require.ErrorAs(t, err, &we, "another binary: its schedule was never approved")
	assert.Contains(t, we.Added, "+ BATCH 50 (the approval predates sources and batch)")

	dec, err := s.Admit("lease_expiry", "sha-a", FromInfo(leaseInfo))
	require.NoError(t, err, "the binary that ran under it")
	assert.Equal(t, FromInfo(leaseInfo).Digest(), dec.Record.Digest)
	rec, _, err := s.Lookup("lease_expiry")
	require.NoError(t, err)
	require.NotNil(t, rec.Policy.Schedule, "recorded")
	batch := leaseInfo
	batch.DefaultBatch = 500
	_, err = s.Admit("lease_expiry", "sha-a", FromInfo(batch))
	require.ErrorAs(t, err, &we, "from then on the schedule is bound")
}

// A declaration's text reaches the operator's terminal and the console
// through the policy's lines: a pattern with a newline, an escape or a
// space shows quoted on its line, and stays distinct from a plain
// pattern that reads like its quoted form.
func TestLinesShowOddPatternsQuoted(t *testing.T) {
	odd := leaseInfo
	odd.KeyScopes = []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{"ff:x\n[ERROR] forged\x1b[2K"}}}
	lines := FromInfo(odd).Lines()
	assert.Contains(t, lines, `ZREM "ff:x\n[ERROR] forged\x1b[2K"`)
	for _, l := range lines {
		assert.NotContains(t, l, "\n")
		assert.NotContains(t, l, "\x1b")
	}
	lookalike := leaseInfo
	lookalike.KeyScopes = []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{`"ff:x\n[ERROR] forged\x1b[2K"`}}}
	assert.NotEqual(t, FromInfo(odd).Digest(), FromInfo(lookalike).Digest())
}
