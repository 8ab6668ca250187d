package scanutil

import (
	"context"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Intake admits a scan's candidates: the first thing a scanner does with
// each index member the host (or its own page read) hands it. For each one
// it
//
//   - ignores a candidate of another source (Sources), an index entry (key
//     and member) already admitted in this scan, and an id already taken
//     (once per scan, or once per index with PerIndex);
//   - classifies the member (Parse) as a canonical id, a spelling
//     FlowFabric accepts but ffscan does not (keys.IDNonCanonical: such an
//     id may name real keys, so it is never acted on under another
//     spelling), an id of another partition (keys.IDForeign) or garbage
//     (keys.IDInvalid);
//   - counts every member that is not a canonical id as an error of class
//     invalid, code "<form>_<Noun>" (invalid_member, non_canonical_member,
//     foreign_member), each time it is seen: it is a fact about the store
//     the operator should see, not a failure to retry;
//   - answers Remove for the forms the scanner removes from its index
//     (Remove), after logging why; in a dry run it notes "would remove"
//     instead and answers Leave; every other such member is noted "left
//     ... in place" and answered Leave;
//   - skips a canonical id that Failures has backed off (Skipped, answer
//     BackedOff).
//
// The rules (Parse, Sources, Remove, Failures...) are set once, usually in
// the scanner; Begin starts one scan's intake, whose Admit is then called
// for each candidate. An Intake is not safe for concurrent use: each scan
// begins its own. It sends nothing and never fails: what it decided is in
// its verdict and in the scan's result. With RemoveWith set it also keeps
// the removals it answered, which QueueRemovals puts into the scan's next
// batch; without, the scanner queues its own (a removal that needs a reply
// check or a write of its own).
type Intake[ID any] struct {
	// Parse classifies a member of the scanned partition p (required):
	// ExecutionIDsIn, ExecutionIDs, FlowIDs, BudgetIDs and QuotaIDs are
	// the usual ones. It returns the id when the form is keys.IDCanonical.
	Parse func(member string, p keys.Partition) (ID, keys.IDForm)
	// Sources, when set, admits only candidates of these sources (by
	// CandidateSource.Name); the others get OtherSource.
	Sources []string
	// Remove lists the forms the scanner removes from its index: usually
	// keys.IDInvalid (a member that can never name keys), and
	// keys.IDForeign for an index that only holds its partition's own
	// ids. The forms not listed are counted and left in place.
	Remove []keys.IDForm
	// Failures, when set, is the scanner's failure tracker: a canonical id
	// it backs off is skipped.
	Failures *scannerapi.FailureTracker
	// BackoffPrefix comes before the member in its Failures key, for a
	// scanner that tracks two kinds of item in one tracker.
	BackoffPrefix string
	// PerIndex takes an id once per index it was read from instead of once
	// per scan, for scanners whose work is one index entry (the same
	// execution in two indexes is two pieces of work).
	PerIndex bool
	// Noun names the members in error codes and notes ("member" when
	// empty: invalid_member).
	Noun string
	// RemoveWith is the command that takes a member out of the index the
	// candidates come from ("SREM" for a set, "ZREM" for a sorted set).
	// When set, every member answered Remove is kept as that command on
	// the candidate's Key, for QueueRemovals.
	RemoveWith string

	req   *scannerapi.ScanRequest
	res   *scannerapi.ScanResult
	log   hclog.Logger
	seen  map[string]struct{} // index entries admitted: key \x00 member
	taken map[string]struct{} // ids taken or backed off: member (key \x00 member with PerIndex)
	// removals answered Remove (with RemoveWith) or queued by the scanner,
	// not yet put into a batch.
	removals []scannerapi.Command
}

// Verdict is what the intake decided for one candidate.
type Verdict uint8

const (
	// Take: a canonical id, not backed off; the scan works on it.
	Take Verdict = iota
	// Remove: not usable, of a form the scanner removes; it was counted
	// and logged, and the scanner queues its removal from Candidate.Key.
	// Never answered in a dry run.
	Remove
	// Leave: not usable and left in place (or a removal a dry run held
	// back); counted and noted.
	Leave
	// BackedOff: a canonical id the failure tracker skips for now;
	// counted as Skipped.
	BackedOff
	// Duplicate: an index entry or an id already admitted in this scan;
	// nothing counted.
	Duplicate
	// OtherSource: a candidate of a source the intake does not take;
	// nothing counted.
	OtherSource
)

// String names the verdict for tests and logs.
func (v Verdict) String() string {
	switch v {
	case Take:
		return "take"
	case Remove:
		return "remove"
	case Leave:
		return "leave"
	case BackedOff:
		return "backed_off"
	case Duplicate:
		return "duplicate"
	case OtherSource:
		return "other_source"
	}
	return "unknown"
}

// Begin starts the intake of one scan: the verdicts' counts and notes go
// to res, removals are logged with the scan's logger (scannerapi.Logger of
// ctx). The returned intake carries in's rules.
func (in Intake[ID]) Begin(ctx context.Context, req *scannerapi.ScanRequest, res *scannerapi.ScanResult) *Intake[ID] {
	in.req, in.res, in.log = req, res, scannerapi.Logger(ctx)
	in.seen, in.taken = map[string]struct{}{}, map[string]struct{}{}
	if in.Noun == "" {
		in.Noun = "member"
	}
	return &in
}

// Admit decides for one candidate. The id is set for Take and BackedOff.
func (in *Intake[ID]) Admit(c scannerapi.Candidate) (ID, Verdict) {
	var zero ID
	if !in.fromSource(c.Source) {
		return zero, OtherSource
	}
	entry := c.Key + "\x00" + c.Member
	if _, ok := in.seen[entry]; ok {
		return zero, Duplicate
	}
	in.seen[entry] = struct{}{}
	id, form := in.Parse(c.Member, in.req.Partition)
	if form != keys.IDCanonical {
		return zero, in.unusable(c, form)
	}
	if !in.Claim(c) {
		return zero, Duplicate
	}
	if in.Failures != nil && in.Failures.ShouldSkip(in.BackoffPrefix+c.Member, in.req.Cycle) {
		in.res.Skipped++
		return id, BackedOff
	}
	return id, Take
}

// Judge is Admit's decision for one candidate without its effects (no
// count, note, log or claim; the failure tracker is only read), for an
// explanation: the member's form and whether the id is backed off, by
// the rules Admit applies. It answers Take, Remove, Leave, BackedOff or
// OtherSource (never Duplicate: it sees one candidate), the id for Take
// and BackedOff, and for BackedOff the first cycle the id is tried again.
func (in Intake[ID]) Judge(c scannerapi.Candidate, p keys.Partition, cycle uint64) (ID, Verdict, uint64) {
	var zero ID
	if !in.fromSource(c.Source) {
		return zero, OtherSource, 0
	}
	id, form := in.Parse(c.Member, p)
	if form != keys.IDCanonical {
		if in.removes(form) {
			return zero, Remove, 0
		}
		return zero, Leave, 0
	}
	if in.Failures != nil {
		if until, off := in.Failures.BackoffUntil(in.BackoffPrefix+c.Member, cycle); off {
			return id, BackedOff, until
		}
	}
	return id, Take, 0
}

// Claim marks c's id as taken in this scan without classifying or counting
// it, for an entry the scanner admitted by rules of its own (one its own
// look-ahead read and checked). It reports false when the id was taken
// already.
func (in *Intake[ID]) Claim(c scannerapi.Candidate) bool {
	k := in.takeKey(c)
	if _, ok := in.taken[k]; ok {
		return false
	}
	in.taken[k] = struct{}{}
	return true
}

// Taken reports whether c's id was taken (or backed off) in this scan.
func (in *Intake[ID]) Taken(c scannerapi.Candidate) bool {
	_, ok := in.taken[in.takeKey(c)]
	return ok
}

func (in *Intake[ID]) takeKey(c scannerapi.Candidate) string {
	if in.PerIndex {
		return c.Key + "\x00" + c.Member
	}
	return c.Member
}

func (in *Intake[ID]) fromSource(s string) bool {
	if len(in.Sources) == 0 {
		return true
	}
	for _, want := range in.Sources {
		if s == want {
			return true
		}
	}
	return false
}

// unusable counts a member that is not a canonical id and says whether the
// scanner removes it.
func (in *Intake[ID]) unusable(c scannerapi.Candidate, form keys.IDForm) Verdict {
	in.res.AddError(scannerapi.ErrInvalid, form.String()+"_"+in.Noun, 1)
	what := formText(form) + " " + strings.ReplaceAll(in.Noun, "_", " ")
	of := ""
	if c.Key != "" {
		of = " of " + c.Key
	}
	if !in.removes(form) {
		in.res.Note("left %s %q%s in place", what, c.Member, of)
		return Leave
	}
	if in.req.DryRun {
		in.res.Note("would remove %s %q%s", what, c.Member, of)
		return Leave
	}
	in.log.Warn("removing an index member that is not a usable id", "index", c.Key, "member", c.Member, "form", form.String())
	if in.RemoveWith != "" {
		in.QueueRemoval(c.Key, c.Member)
	}
	return Remove
}

// QueueRemoval keeps the removal of member from index (with RemoveWith)
// for the next QueueRemovals, for a member the scanner itself found to be
// removable (an entry whose work is already done, say).
func (in *Intake[ID]) QueueRemoval(index, member string) {
	if in.RemoveWith == "" {
		panic("scanutil: Intake.QueueRemoval without RemoveWith")
	}
	in.removals = append(in.removals, scannerapi.Command{in.RemoveWith, index, member})
}

// Retire queues the removal of an index entry whose subject is gone (a
// flow or a definition the member names no longer exists), counted by the
// scanner; in a dry run it only notes that it would.
func (in *Intake[ID]) Retire(index, member string) {
	if in.req.DryRun {
		in.res.Note("would remove %q from %s", member, index)
		return
	}
	in.QueueRemoval(index, member)
}

// QueueRemovals puts the removals kept so far into b and forgets them. No
// reply is checked: a removal that failed leaves the member in the index,
// where the next scan reads, counts and removes it again.
func (in *Intake[ID]) QueueRemovals(b *Batch) {
	for _, cmd := range in.removals {
		b.Add(nil, cmd)
	}
	in.removals = nil
}

func (in *Intake[ID]) removes(form keys.IDForm) bool {
	for _, f := range in.Remove {
		if f == form {
			return true
		}
	}
	return false
}

// formText is a form as notes write it.
func formText(f keys.IDForm) string { return strings.ReplaceAll(f.String(), "_", "-") }

// ExecutionIDsIn classifies members of an index of the scanned partition:
// a canonical execution id of another partition is keys.IDForeign.
func ExecutionIDsIn(member string, p keys.Partition) (keys.ExecutionID, keys.IDForm) {
	return keys.ClassifyExecutionIDIn(member, p)
}

// ExecutionIDs classifies execution ids of any partition.
func ExecutionIDs(member string, _ keys.Partition) (keys.ExecutionID, keys.IDForm) {
	return keys.ClassifyExecutionID(member)
}

// FlowIDs classifies bare flow ids.
func FlowIDs(member string, _ keys.Partition) (keys.FlowID, keys.IDForm) {
	return keys.ClassifyFlowID(member)
}

// BudgetIDs classifies bare budget ids.
func BudgetIDs(member string, _ keys.Partition) (keys.BudgetID, keys.IDForm) {
	return keys.ClassifyBudgetID(member)
}

// QuotaIDs classifies bare quota ids (uuids, spelled as budget ids are).
func QuotaIDs(member string, _ keys.Partition) (keys.QuotaID, keys.IDForm) {
	id, form := keys.ClassifyBudgetID(member)
	if form != keys.IDCanonical {
		return keys.QuotaID{}, form
	}
	return keys.QuotaIDFrom(id.UUID()), form
}
