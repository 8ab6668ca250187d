package scannerapi

import (
	"context"
	"errors"
	"fmt"
)

// Explainer is implemented by scanners that can say what their next scan
// would do with one execution and why: the question "why is my job stuck?"
// asked of one scanner. It is optional; the host asks it through the
// Explain RPC (a plugin built before it existed answers "does not
// explain", ErrNotExplained, and keeps working otherwise).
//
// The answer must come from the predicate the scan itself uses, never a
// second copy of it: a scanner keeps its decision for one item in one
// function, which ScanPartition and Explain both call. Explain reads
// through host as a scan does (the host refuses every write, so an
// explanation never changes the store) and must not change the scanner's
// own state either: no failure recorded, nothing remembered or forgotten.
type Explainer interface {
	Explain(ctx context.Context, host Host, req *ExplainRequest) (*Explanation, error)
}

// ExplainRequest asks a scanner about one execution.
type ExplainRequest struct {
	// Scan is the request the scanner's next scan of the execution's
	// partition would get, as far as the execution is concerned: the
	// partition, the host's now and the scanner's current cycle, the
	// batch, the lanes, and as Candidates the entries of the execution
	// (or of its flow) the host would hand the scan now, read from the
	// scanner's sources. DryRun is set.
	Scan ScanRequest
	// ExecutionID is the execution asked about, canonical.
	ExecutionID string
}

// Verdict is what a scanner's next scan does with an execution.
type Verdict string

// Verdicts.
const (
	// VerdictActs: the next scan acts on it (Reason says how).
	VerdictActs Verdict = "acts"
	// VerdictWaits: not due yet; DueAtMs says when it is.
	VerdictWaits Verdict = "waits"
	// VerdictSkips: due, but the scan leaves it alone (backed off,
	// filtered out, known to be left in place, blocked): Reason says why.
	VerdictSkips Verdict = "skips"
	// VerdictNothing: there is nothing for this scanner to do with it.
	VerdictNothing Verdict = "nothing"
)

// Explanation is a scanner's answer about one execution.
type Explanation struct {
	Verdict Verdict
	// Reason is a short code: for the scanner's own decisions the code its
	// scan counts or notes (e.g. "marked_expired", "backed_off",
	// "filtered", "already_expired").
	Reason string
	// Detail is one line for a person.
	Detail string
	// DueAtMs is when the execution is (or was) due for this scanner, in
	// Unix ms of the store's clock; 0 when unknown or not timed.
	DueAtMs int64
	// BackoffUntilCycle, with Reason "backed_off", is the first cycle at
	// which the scanner tries the execution again.
	BackoffUntilCycle uint64
	// Inconsistent lists what the scanner found inconsistent in the store
	// about the execution (an index entry its core disagrees with).
	Inconsistent []string
}

// ErrNotExplained is what asking a scanner that does not implement
// Explainer returns (locally or from a plugin built without it).
var ErrNotExplained = errors.New("the scanner does not explain its decisions")

// Explains returns e with Verdict v, Reason and a formatted Detail: a
// shorthand for Explain implementations.
func Explains(v Verdict, reason, format string, args ...any) *Explanation {
	return &Explanation{Verdict: v, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
