package unblock

import (
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// tally counts each item's outcome into the scan's result, keeps it on
// the item (its decision, which Explain reports) and feeds the failure
// tracker.
type tally struct {
	res *scannerapi.ScanResult
	// failures is the scanner's tracker; nil in Explain's dry run, which
	// changes none of the scanner's state.
	failures *scannerapi.FailureTracker
	cycle    uint64
	log      hclog.Logger
}

// skip counts an item left blocked on purpose.
func (t *tally) skip(it *item, reason, format string, args ...any) {
	t.res.Skipped++
	it.decide(scannerapi.VerdictSkips, reason, format, args...)
}

// fail counts a failed read or call and keeps the item blocked.
func (t *tally) fail(it *item, class scannerapi.ErrorClass, code string) {
	it.blocked = true
	t.res.AddError(class, code, 1)
	it.decide(scannerapi.VerdictSkips, code, "stays blocked: a check failed (%s %s); the scan counts it and tries again", class, code)
	if t.failures != nil && t.failures.RecordFailureClass(it.member, t.cycle, class) {
		t.log.Error("persistent failure; skipping the execution for a while", "execution_id", it.member,
			"class", class, "code", code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}

// unblocked counts an execution the library unblocked, or found moved on.
func (t *tally) unblocked(it *item, moved bool) {
	if moved {
		t.res.Skipped++
	} else {
		t.res.Processed++
	}
	if t.failures != nil {
		t.failures.RecordSuccess(it.member)
	}
}

// decision is the first verdict the scan reached for an item, and what it
// found inconsistent in the store about it. The detail is formatted only
// when asked for (Explain).
type decision struct {
	verdict      scannerapi.Verdict
	reason       string
	format       string
	args         []any
	inconsistent []string
}

// decide records the verdict, unless one was reached before.
func (it *item) decide(v scannerapi.Verdict, reason, format string, args ...any) {
	if it.decision.verdict == "" {
		it.decision.verdict, it.decision.reason, it.decision.format, it.decision.args = v, reason, format, args
	}
}

// explanation is the decision for a person.
func (d *decision) explanation() *scannerapi.Explanation {
	return &scannerapi.Explanation{Verdict: d.verdict, Reason: d.reason, Detail: fmt.Sprintf(d.format, d.args...),
		Inconsistent: d.inconsistent}
}
