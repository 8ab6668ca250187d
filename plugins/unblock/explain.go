package unblock

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Explain implements scannerapi.Explainer: the scan itself, run on the
// execution's blocked-set entry in a dry run that explains (scan.ex).
// Every decision it reports is the scan's own (the budget, quota and
// capability checks, the filter, the blocking reason), and the scan's
// effects on the scanner are held back: no failure is recorded, nothing
// is removed.
func (s *Scanner) Explain(ctx context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	c, ok := scanutil.ExplainCandidate(req)
	if !ok {
		return scannerapi.Explains(scannerapi.VerdictNothing, "not_blocked", "not in a lane's blocked:budget, blocked:quota or blocked:route set"), nil
	}
	id, e := s.intake().Explain(c, &req.Scan)
	if e != nil {
		return e, nil
	}
	r := req.Scan
	r.DryRun, r.Candidates = true, []scannerapi.Candidate{c}
	sc := s.newScan(ctx, &r)
	sc.ex = &scannerapi.Explanation{}
	sc.toRead = []*item{{src: c.Source, lane: c.Lane, key: c.Key, member: c.Member, id: id}}
	if err := sc.readPartitions(ctx, host); err != nil {
		return nil, err
	}
	if _, err := scanutil.Waves(ctx, host, 0, sc.build); err != nil {
		return nil, fmt.Errorf("explain reads: %w", err)
	}
	if sc.ex.Verdict == "" {
		return scannerapi.Explains(scannerapi.VerdictNothing, "undecided", "the scan reached no decision for it"), nil
	}
	return sc.ex, nil
}
