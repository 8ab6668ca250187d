package observers

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Explain implements scannerapi.Explainer for index_reconciler (detect
// only): whether its next scan reports the execution missing from the
// index its state names. It takes the scan's steps with the scan's
// functions: the core's state fields and the filter, ExpectedIndex, the
// ZSCORE of that index, and sameState on the core read again after it.
func (s *IndexReconciler) Explain(ctx context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	c, ok := scanutil.ExplainCandidate(req)
	if !ok {
		return scannerapi.Explains(scannerapi.VerdictNothing, "not_in_all_executions", "not a member of %s: the reconciler never visits it",
			keys.FlowPart(req.Scan.Partition).AllExecutions()), nil
	}
	id, e := indexIntake.Explain(c, &req.Scan)
	if e != nil {
		return e, nil
	}
	filter := s.filter.Get()
	pk := keys.FlowPart(req.Scan.Partition)
	core := append(scannerapi.Command{"HMGET", keys.Exec(id).Core()}, stateFields...)
	rs, err := host.Exec(ctx, append([]scannerapi.Command{core}, filter.ReadCommands(id)...))
	if err != nil {
		return nil, fmt.Errorf("explain reads: %w", err)
	}
	if rs[0].Failed() {
		_, code := scanutil.ClassifyReply(rs[0])
		return scannerapi.Explains(scannerapi.VerdictSkips, code, "its core could not be read (%s)", code), nil
	}
	f := make([]string, len(stateFields))
	for i := range f {
		if i < len(rs[0].Array) {
			f[i], _ = rs[0].Array[i].Text()
		}
	}
	if f[0] == "" {
		e := scannerapi.Explains(scannerapi.VerdictActs, "core_missing", "in all_executions with no core: the next scan reports it")
		e.Inconsistent = []string{pk.AllExecutions() + " holds an execution whose core is gone"}
		return e, nil
	}
	if !filter.IsNoop() && !filter.Decide(rs[1:]) {
		return scannerapi.Explains(scannerapi.VerdictSkips, "filtered", "outside this scanner's filter (%s)", filter.String()), nil
	}
	exp := ExpectedIndex(pk, f[1], f[2], f[3], f[4])
	if exp == "" {
		return scannerapi.Explains(scannerapi.VerdictNothing, "no_index", "its state (%s, %s, %s) names no lane index", f[1], f[2], f[3]), nil
	}
	rs, err = host.Exec(ctx, []scannerapi.Command{{"ZSCORE", exp, id.String()}, core})
	if err != nil {
		return nil, fmt.Errorf("explain reads: %w", err)
	}
	switch {
	case rs[0].Failed():
		_, code := scanutil.ClassifyReply(rs[0])
		return scannerapi.Explains(scannerapi.VerdictSkips, code, "%s could not be read (%s)", exp, code), nil
	case rs[0].IsNil() && !sameState(rs[1], f[1:]):
		return scannerapi.Explains(scannerapi.VerdictNothing, "moved_on", "its state changed while it was read"), nil
	case rs[0].IsNil():
		e := scannerapi.Explains(scannerapi.VerdictActs, "missing_from_index", "%v but not in %s: the next scan reports it (detect only)", f[1:], exp)
		e.Inconsistent = []string{fmt.Sprintf("state %v names %s, which does not hold it", f[1:4], exp)}
		return e, nil
	}
	return scannerapi.Explains(scannerapi.VerdictNothing, "consistent", "in %s, as its state names", exp), nil
}
