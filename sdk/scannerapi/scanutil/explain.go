package scanutil

import (
	"strings"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// The start every scannerapi.Explainer built on an Intake shares: find the
// execution's candidate in the request, then ask the intake's rule about
// it. What follows (the scanner's own reads and decisions) is the
// scanner's.

// ExplainCandidate returns the candidate an explanation is about: the
// first of the request's candidates whose member is the execution asked
// about, from one of sources (from any source when none is given). The
// first is the one a scan admits: its intake takes an id once.
func ExplainCandidate(req *scannerapi.ExplainRequest, sources ...string) (scannerapi.Candidate, bool) {
	for _, c := range req.Scan.Candidates {
		if c.Member != req.ExecutionID {
			continue
		}
		if len(sources) == 0 {
			return c, true
		}
		for _, s := range sources {
			if c.Source == s {
				return c, true
			}
		}
	}
	return scannerapi.Candidate{}, false
}

// Explain is the intake's part of an explanation of candidate c in the
// scan scan: Judge's verdict, said. For a candidate the scan takes it
// returns the id and nil, and the scanner goes on with its own decisions;
// otherwise the explanation of why the scan skips it, with verdict skips
// and reason
//
//   - "backed_off": a canonical id the failure tracker backs off, with the
//     failures counted and BackoffUntilCycle, the cycle it is tried again;
//   - "invalid_member": a member that is not a canonical id (garbage, a
//     spelling ffscan does not act on, an id of another partition);
//   - "other_source": a candidate of a source the intake does not take.
//
// Like Judge it changes nothing. The caller adds what it knows besides
// (DueAtMs for an index scored by due time).
func (in Intake[ID]) Explain(c scannerapi.Candidate, scan *scannerapi.ScanRequest) (ID, *scannerapi.Explanation) {
	id, v, until := in.Judge(c, scan.Partition, scan.Cycle)
	switch v {
	case Take:
		return id, nil
	case BackedOff:
		e := scannerapi.Explains(scannerapi.VerdictSkips, "backed_off",
			"backed off after %d failed attempts in a row; tried again at cycle %d (now %d)",
			in.Failures.Failures(in.BackoffPrefix+c.Member), until, scan.Cycle)
		e.BackoffUntilCycle = until
		return id, e
	case OtherSource:
		var zero ID
		return zero, scannerapi.Explains(scannerapi.VerdictSkips, "other_source", "%s is not a source this scanner takes", c.Source)
	}
	_, form := in.Parse(c.Member, scan.Partition)
	noun := in.Noun
	if noun == "" {
		noun = "member"
	}
	what := formText(form) + " " + strings.ReplaceAll(noun, "_", " ")
	of := ""
	if c.Key != "" {
		of = " of " + c.Key
	}
	done := "left in place"
	if v == Remove {
		done = "the next scan removes it"
	}
	var zero ID
	return zero, scannerapi.Explains(scannerapi.VerdictSkips, "invalid_member",
		"the member %q%s is not a usable id (%s): never acted on, %s", c.Member, of, what, done)
}
