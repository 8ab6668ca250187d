package edgecancel

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Dispatcher is edge_cancel_dispatcher.
type Dispatcher struct{ base }

// NewDispatcher returns edge_cancel_dispatcher with default options.
func NewDispatcher() *Dispatcher {
	return &Dispatcher{base{name: DispatcherName, interval: time.Second, function: FunctionDrain,
		functions: []string{FunctionDrain, FunctionCancel},
		// HGET: the filter. HMGET: the group and the siblings' cores.
		// SREM: invalid tuples.
		commands: []string{"HGET", "HMGET", "SREM"}, failures: scannerapi.NewFailureTracker()}}
}

// pendingGroup is one group on its way through the waves.
type pendingGroup struct {
	t        tuple
	reason   string
	siblings []*sibling
	blocked  bool // a sibling is not done: no drain this cycle
}

// sibling is one execution a group asks to cancel.
type sibling struct {
	g    *pendingGroup
	raw  string
	id   keys.ExecutionID
	core scanutil.CancelCore
	out  scanutil.CancelResult
}

// dispatch is the state of one ScanPartition call.
type dispatch struct {
	s   *Dispatcher
	req *scannerapi.ScanRequest
	res *scannerapi.ScanResult
	log hclog.Logger
}

// ScanPartition implements scannerapi.Scanner.
func (s *Dispatcher) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if err := partitionCheck(req); err != nil {
		return nil, err
	}
	d := &dispatch{s: s, req: req, res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx)}
	ts, in := s.tuples(ctx, req, d.res)
	kept, err := keepByFilter(ctx, host, s.filter.Get(), ts, d.res)
	if err != nil {
		return nil, err
	}
	groups, err := d.readGroups(ctx, host, kept, in)
	if err != nil {
		return nil, err
	}
	if err := d.readSiblings(ctx, host, groups); err != nil {
		return d.res, d.partial(err, groups)
	}
	if err := d.cancel(ctx, host, groups); err != nil {
		return d.res, d.partial(err, groups)
	}
	if err := d.drain(ctx, host, groups); err != nil {
		return d.res, d.partial(err, groups)
	}
	return d.res, nil
}

// partial accounts for a wave that could not run after earlier ones did:
// their work stands; the host comes back for the rest.
func (d *dispatch) partial(err error, groups []*pendingGroup) error {
	d.res.AddError(scannerapi.ErrTransport, "exec", int64(len(groups)))
	d.res.More = true
	d.log.Warn("a wave failed; the groups stay pending", "error", err)
	return nil
}

// readGroups reads every group's reason, members and flag (and removes
// invalid tuples in the same Exec).
func (d *dispatch) readGroups(ctx context.Context, host scannerapi.Host, ts []tuple, in *scanutil.Intake[tuple]) ([]*pendingGroup, error) {
	var b scanutil.Batch
	in.QueueRemovals(&b)
	var groups []*pendingGroup
	for _, t := range ts {
		t := t
		b.Add(func(r []scannerapi.Reply) {
			if r[0].Failed() {
				class, code := scanutil.ClassifyReply(r[0])
				d.s.failed(d.res, d.log, d.req.Cycle, t, class, "group_read_"+code)
				return
			}
			if g := d.plan(t, groupOf(r[0])); g != nil {
				groups = append(groups, g)
			}
		}, append(scannerapi.Command{"HMGET", groupKeys(d.req.Partition, t)[1]}, groupFields...))
	}
	if err := b.Exec(ctx, host); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return groups, nil
}

// plan turns a group's fields into its siblings. A group with neither flag
// nor members goes straight to the drain.
func (d *dispatch) plan(t tuple, gr group) *pendingGroup {
	g := &pendingGroup{t: t, reason: cancelReason(gr)}
	raws, more := siblingsOf(gr)
	if more {
		// The rest wait for the next cycle: no drain yet.
		g.blocked = true
		d.res.More = true
	}
	for _, raw := range raws {
		sb := &sibling{g: g, raw: raw}
		id, form := keys.ClassifyExecutionID(raw)
		if form != keys.IDCanonical {
			// Not an execution: there is nothing to cancel (FlowFabric
			// counts it not_found too).
			sb.out = scanutil.CancelResult{Kind: scanutil.CancelNotFound, Code: "invalid_sibling"}
			d.res.AddError(scannerapi.ErrInvalid, "invalid_sibling", 1)
		} else {
			sb.id = id
		}
		g.siblings = append(g.siblings, sb)
	}
	return g
}

// readSiblings reads every sibling's core.
func (d *dispatch) readSiblings(ctx context.Context, host scannerapi.Host, groups []*pendingGroup) error {
	var b scanutil.Batch
	for _, g := range groups {
		for _, sb := range g.siblings {
			if sb.id.IsZero() {
				continue
			}
			sb := sb
			b.Add(func(r []scannerapi.Reply) {
				if r[0].Failed() {
					class, code := scanutil.ClassifyReply(r[0])
					d.siblingFailed(sb, class, "core_read_"+code)
					return
				}
				sb.core = scanutil.ParseCancelCore(r[0])
				if !sb.core.BadReply && !sb.core.Exists {
					sb.out = scanutil.CancelResult{Kind: scanutil.CancelNotFound, Code: scanutil.CodeExecutionNotFound}
				}
			}, append(scannerapi.Command{"HMGET", keys.Exec(sb.id).Core()}, scanutil.CancelCoreFields()...))
		}
	}
	return b.Exec(ctx, host)
}

// siblingFailed keeps the sibling's group pending and counts the failure.
func (d *dispatch) siblingFailed(sb *sibling, class scannerapi.ErrorClass, code string) {
	sb.out = scanutil.CancelResult{Kind: scanutil.CancelFailed, Class: class, Code: code}
	sb.g.blocked = true
	d.s.failed(d.res, d.log, d.req.Cycle, sb.g.t, class, code)
}

// cancel cancels every sibling that still exists, in one Exec.
func (d *dispatch) cancel(ctx context.Context, host scannerapi.Host, groups []*pendingGroup) error {
	var b scanutil.Batch
	for _, g := range groups {
		for _, sb := range g.siblings {
			if sb.id.IsZero() || sb.out.Kind == scanutil.CancelNotFound || sb.out.Kind == scanutil.CancelFailed {
				continue
			}
			ks, err := scanutil.CancelKeys(sb.id, sb.core)
			if err != nil {
				d.siblingFailed(sb, scannerapi.ErrInvalid, err.Error())
				continue
			}
			if d.req.DryRun {
				sb.out = scanutil.PredictCancel(sb.core)
				d.res.Note("%s: sibling %s: %s", g.t.raw, sb.raw, sb.out.Code)
				continue
			}
			sb := sb
			b.Add(func(r []scannerapi.Reply) {
				sb.out = scanutil.ClassifyCancel(r[0])
				switch {
				case sb.out.Kind == scanutil.CancelCancelled:
					d.res.Processed++
				case !sb.out.Kind.Done():
					d.siblingFailed(sb, sb.out.Class, sb.out.Code)
				}
			}, scanutil.CancelCall(sb.id, ks, g.reason, Source))
		}
	}
	return b.Exec(ctx, host)
}

// drain drains every group whose siblings are all done, in one Exec.
func (d *dispatch) drain(ctx context.Context, host scannerapi.Host, groups []*pendingGroup) error {
	var b scanutil.Batch
	for _, g := range groups {
		if g.blocked {
			continue
		}
		if d.req.DryRun {
			d.res.Processed++
			d.res.Note("%s: would drain after %d sibling(s)", g.t.raw, len(g.siblings))
			continue
		}
		g := g
		b.Add(func(r []scannerapi.Reply) {
			if o := classifyDrain(r[0]); o.kind == outFailed {
				d.s.failed(d.res, d.log, d.req.Cycle, g.t, o.class, o.code)
			} else {
				d.s.failures.RecordSuccess(g.t.raw)
				d.res.Processed++
			}
		}, scannerapi.FCall(FunctionDrain, groupKeys(d.req.Partition, g.t), g.t.flow.String(), g.t.downstream.String()))
	}
	return b.Exec(ctx, host)
}
