package unblock

import (
	"context"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Explain implements scannerapi.Explainer: the scan itself, run on the
// execution's blocked-set entry in a dry run, and the decision it reached
// for that entry (the budget, quota and capability checks, the filter,
// the blocking reason). The dry run feeds no failure tracker and removes
// nothing, so explaining changes none of the scanner's state.
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
	it := &item{src: c.Source, lane: c.Lane, key: c.Key, member: c.Member, id: id}
	if err := newScan(ctx, &r, s.filter.Get(), tally{res: &scannerapi.ScanResult{}}, []*item{it}).run(ctx, host, "explain reads"); err != nil {
		return nil, err
	}
	if it.decision.verdict == "" {
		return scannerapi.Explains(scannerapi.VerdictNothing, "undecided", "the scan reached no decision for it"), nil
	}
	return it.decision.explanation(), nil
}
