package leaseexpiry

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Explain implements scannerapi.Explainer: what the next scan does with
// the execution's lease_expiry entry. It asks the scan's own predicates in
// the scan's order, reading through host as a scan does and changing
// nothing: the intake's rule (the member's form, the failure backoff), the
// memory of entries left in place, the filter, and predict, the rule of
// ff_mark_lease_expired_if_due that the scan's dry run applies to the same
// core fields (the live scan leaves that decision to the function, which
// re-validates in Valkey; the tests hold predict to what it answers).
func (s *Scanner) Explain(ctx context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	c, ok := scanutil.ExplainCandidate(req, "lease_expiry")
	if !ok {
		return scannerapi.Explains(scannerapi.VerdictNothing, "no_due_entry", "no due entry in %s", keys.FlowPart(req.Scan.Partition).LeaseExpiry()), nil
	}
	scan := &req.Scan
	due := int64(c.Score)
	id, e := s.intake().Explain(c, scan)
	if e != nil {
		if e.Reason == "backed_off" {
			e.DueAtMs = due
		}
		return e, nil
	}
	if _, stuck := s.stuck.Peek(scan.Partition.Index, id.String(), c.Score, scan.Cycle); stuck {
		e := scannerapi.Explains(scannerapi.VerdictSkips, "left_in_place",
			"already marked expired or revoked (as the function answered): the entry waits in the index for a reclaim")
		e.DueAtMs = due
		return e, nil
	}
	s.mu.Lock()
	filter := s.filter
	s.mu.Unlock()
	cmds := append([]scannerapi.Command{append(scannerapi.Command{"HMGET", keys.Exec(id).Core()}, dryRunFields...)}, filter.ReadCommands(id)...)
	rs, err := host.Exec(ctx, cmds)
	if err != nil {
		return nil, fmt.Errorf("explain reads: %w", err)
	}
	if !filter.IsNoop() && !filter.Decide(rs[1:]) {
		e := scannerapi.Explains(scannerapi.VerdictSkips, "filtered", "outside this scanner's filter (%s)", filter.String())
		e.DueAtMs = due
		return e, nil
	}
	o := predict(rs[0], scan.NowMs)
	switch o.kind {
	case outMarked:
		e = scannerapi.Explains(scannerapi.VerdictActs, detailMarked, "the lease expired at %d ms: the next scan marks it expired (reclaimable)", due)
	case outStuck:
		e = scannerapi.Explains(scannerapi.VerdictSkips, o.code, "the lease is already %s: left in the index for a reclaim", o.code)
	case outCleaned:
		e = scannerapi.Explains(scannerapi.VerdictSkips, o.code, "a stale entry (%s): the function drops it from the index", o.code)
		if o.code == detailNotActive {
			e.Inconsistent = append(e.Inconsistent, "a lease_expiry entry for an execution that is not active")
		}
	case outNotDue:
		e = scannerapi.Explains(scannerapi.VerdictWaits, o.code, "renewed since the index was read: the lease has not expired")
	default:
		e = scannerapi.Explains(scannerapi.VerdictSkips, o.code, "its core could not be read (%s %s)", o.class, o.code)
	}
	e.DueAtMs = due
	return e, nil
}
