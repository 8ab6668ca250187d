package depreconciler

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Explain implements scannerapi.Explainer: the scan's own dry run on the
// one child (the intake's rule, the filter, depresolve's reconciliation
// with its calls held back), without the scan's effects on the scanner
// (the failure tracker is only read, nothing is removed). Its verdict is
// what the dry run would have called, or why it called nothing.
func (s *Scanner) Explain(ctx context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	c, ok := scanutil.ExplainCandidate(req, sourceName)
	if !ok {
		return scannerapi.Explains(scannerapi.VerdictNothing, "not_blocked_by_dependencies", "in no lane's blocked:dependencies set"), nil
	}
	id, e := s.intake().Explain(c, &req.Scan)
	if e != nil {
		return e, nil
	}
	r := req.Scan
	r.DryRun, r.Candidates = true, []scannerapi.Candidate{c}
	sc := &scan{s: s, req: &r, res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx), x: newScanExec(host, true), window: map[string]int{}}
	ids, err := sc.keep(ctx, []keys.ExecutionID{id})
	if err != nil {
		return nil, fmt.Errorf("explain reads: %w", err)
	}
	if len(ids) == 0 {
		return scannerapi.Explains(scannerapi.VerdictSkips, "filtered", "outside this scanner's filter (%s)", s.filter.Get().String()), nil
	}
	out, err := sc.reconcile(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("explain reads: %w", err)
	}
	if held := sc.x.held(); len(held) > 0 {
		return scannerapi.Explains(scannerapi.VerdictActs, "resolve",
			"an upstream finished and the push path missed it: the next scan calls %s", describeCall(held[0])), nil
	}
	if class, failed := sc.x.failure(id); failed {
		return scannerapi.Explains(scannerapi.VerdictSkips, string(class), "reading its edges failed (%s); the scan counts it and tries again", class), nil
	}
	for _, e := range out.Errors {
		return scannerapi.Explains(scannerapi.VerdictSkips, e.Code, "its edges cannot be resolved (%s %s)", e.Class, e.Code), nil
	}
	if out.NotTerminal > 0 {
		return scannerapi.Explains(scannerapi.VerdictWaits, "upstream_not_terminal",
			"%d of its upstream executions have not finished: it waits for them (their completion releases it)", out.NotTerminal), nil
	}
	return scannerapi.Explains(scannerapi.VerdictNothing, "nothing_to_resolve", "its edges are resolved or pending a group's decision; nothing to call"), nil
}
