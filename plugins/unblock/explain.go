package unblock

import (
	"context"

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
	sc.ex = &explaining{}
	sc.next.read = []*item{{src: c.Source, lane: c.Lane, key: c.Key, member: c.Member, id: id}}
	if err := sc.run(ctx, host, "explain reads"); err != nil {
		return nil, err
	}
	if sc.ex.Verdict == "" {
		return scannerapi.Explains(scannerapi.VerdictNothing, "undecided", "the scan reached no decision for it"), nil
	}
	return &sc.ex.Explanation, nil
}

// explaining is what a scan run by Explain keeps: the first verdict its
// decisions reach for the one entry, and what they found inconsistent.
// Its methods do nothing on nil, in a scan.
type explaining struct{ scannerapi.Explanation }

// say records the verdict, unless one was reached before.
func (x *explaining) say(v scannerapi.Verdict, reason, format string, args ...any) {
	if x != nil && x.Verdict == "" {
		x.Explanation = *scannerapi.Explains(v, reason, format, args...)
	}
}

// inconsistent adds what the scan found inconsistent in the store.
func (x *explaining) inconsistent(what string) {
	if x != nil {
		x.Inconsistent = append(x.Inconsistent, what)
	}
}
