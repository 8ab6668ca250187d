package edgecancel

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Reconciler is edge_cancel_reconciler.
type Reconciler struct{ base }

// NewReconciler returns edge_cancel_reconciler with default options.
func NewReconciler() *Reconciler {
	return &Reconciler{base{name: ReconcilerName, interval: 10 * time.Second, function: FunctionReconcile,
		functions: []string{FunctionReconcile},
		// HGET: the filter. HMGET: dry-run reads. SREM: invalid tuples.
		commands: []string{"HGET", "HMGET", "SREM"}, failures: scannerapi.NewFailureTracker()}}
}

// ScanPartition implements scannerapi.Scanner: one Exec of filter reads,
// one of reconcile calls.
func (s *Reconciler) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if err := partitionCheck(req); err != nil {
		return nil, err
	}
	res, log := &scannerapi.ScanResult{}, scannerapi.Logger(ctx)
	ts, in := s.tuples(ctx, req, res)
	filter := s.filter.Get()
	kept, err := keepByFilter(ctx, host, filter, ts, res)
	if err != nil {
		return nil, err
	}
	var b scanutil.Batch
	in.QueueRemovals(&b)
	for _, t := range kept {
		t := t
		if req.DryRun {
			b.Add(func(r []scannerapi.Reply) { s.predict(res, t, r[0]) },
				append(scannerapi.Command{"HMGET", groupKeys(req.Partition, t)[1]}, groupFields...))
			continue
		}
		b.Add(func(r []scannerapi.Reply) { s.record(res, log, req.Cycle, t, r[0]) },
			scannerapi.FCall(FunctionReconcile, groupKeys(req.Partition, t), t.flow.String(), t.downstream.String()))
	}
	if err := b.Exec(ctx, host); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return res, nil
}

// record reads one reconcile reply: sremmed_stale and completed_drain are
// work done, no_op is not (the dispatcher owns a running group).
func (s *Reconciler) record(res *scannerapi.ScanResult, log hclog.Logger, cycle uint64, t tuple, r scannerapi.Reply) {
	o := classifyReconcile(r)
	if o.kind == outFailed {
		s.failed(res, log, cycle, t, o.class, o.code)
		return
	}
	s.failures.RecordSuccess(t.raw)
	switch o.kind {
	case outDone:
		res.Processed++
	case outNoOp:
		res.Skipped++
	case outUnexpected:
		s.failed(res, log, cycle, t, o.class, o.code)
	}
}

// predict is the dry-run view of one group from its fields.
func (s *Reconciler) predict(res *scannerapi.ScanResult, t tuple, r scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		res.AddError(class, code, 1)
		return
	}
	if why, drop := predictReconcile(groupOf(r)); drop {
		res.Processed++
		res.Note("%s: would drop (%s)", t.raw, why)
		return
	}
	res.Skipped++
	res.Note("%s: the library decides from the siblings' states", t.raw)
}
