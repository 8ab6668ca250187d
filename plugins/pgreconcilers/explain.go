package pgreconcilers

import (
	"context"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Explain implements scannerapi.Explainer. The decision what is due is
// the host's library's candidate function, which the host ran for the
// execution's partition exactly as for a scan: the candidates are the
// rows of it that name the execution. The reconciler adds its intake's
// rule (the member's form, the failure backoff); the action function
// re-checks under its row locks when it is called.
func (r *Reconciler) Explain(_ context.Context, _ scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	if len(req.Scan.Candidates) == 0 {
		return scannerapi.Explains(scannerapi.VerdictNothing, "not_a_candidate", "%s returns no row for it now", r.sp.candidates), nil
	}
	c := req.Scan.Candidates[0]
	if _, e := r.intake().Explain(c, &req.Scan); e != nil {
		if e.Reason == "backed_off" {
			e.DueAtMs = int64(c.Score)
		}
		return e, nil
	}
	e := scannerapi.Explains(scannerapi.VerdictActs, r.sp.action, "%s returns %s: the next scan calls %s for it", r.sp.candidates, c.Member, r.sp.action)
	e.DueAtMs = int64(c.Score)
	return e, nil
}
