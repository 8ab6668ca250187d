// Package edgecancel holds the two sibling-cancel scanners of a flow
// partition (scanners.md §10.3, §10.4), one binary:
//
//   - edge_cancel_dispatcher cancels the siblings an edge group flagged
//     for cancellation (an any_of or quorum group with cancel_remaining
//     whose outcome is decided), then drains the group
//     (ff_drain_sibling_cancel_group);
//   - edge_cancel_reconciler is its safety net
//     (ff_reconcile_sibling_cancel_group): it drops stale tuples and
//     completes drains whose siblings all ended, and leaves a group whose
//     siblings still run to the dispatcher.
//
// Both read ff:idx:{fp:N}:pending_cancel_groups, a SET of
// "<flow id>|<downstream execution id>" tuples, one SSCAN step per cycle
// (FlowFabric samples 50 at random; a scan visits every tuple in turn).
//
// The dispatcher, per group: one wave reads the group (and the filter's
// reads of the downstream execution), one reads every sibling's core, one
// cancels them (ff_cancel_execution with the group's reason, source
// operator_override; keys from each sibling's real state, shared with the
// cancel reconciler in scanutil), and one drains the groups whose every
// sibling is done. A sibling is done when it was cancelled, had already
// ended (execution_not_active) or does not exist (execution_not_found):
// FlowFabric's Valkey path turned those two codes into transport errors
// and aborted the group at the first ended sibling (P6). A sibling that
// fails otherwise keeps its group pending for the next cycle; the others
// are still cancelled.
//
// The namespace / instance-tag filter applies to the group's downstream
// execution (FlowFabric stores it and never applies it, P13): a group of
// another tenant is left alone, siblings included.
package edgecancel

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Names, version, functions.
const (
	DispatcherName    = "edge_cancel_dispatcher"
	ReconcilerName    = "edge_cancel_reconciler"
	Version           = "1.0.0"
	FunctionDrain     = "ff_drain_sibling_cancel_group"
	FunctionReconcile = "ff_reconcile_sibling_cancel_group"
	FunctionCancel    = "ff_cancel_execution"
	// DefaultReason is the cancel reason of a group that recorded none.
	DefaultReason = "sibling_quorum_satisfied"
	// Source is the cancel source: no lease fence.
	Source = "operator_override"
	// MaxSiblings bounds the siblings cancelled per group per cycle.
	MaxSiblings = 1024
	source      = "pending_cancel_groups"
	sourceKey   = "ff:idx:{p}:pending_cancel_groups"
)

// groupFields are read from an edge group, in this order.
var groupFields = []string{"cancel_siblings_reason", "cancel_siblings_pending_members", "cancel_siblings_pending_flag"}

// tuple is one pending_cancel_groups member, parsed.
type tuple struct {
	raw        string
	flow       keys.FlowID
	downstream keys.ExecutionID
}

// parseTuple splits "<fid>|<eid>". It returns the form of the weaker part:
// invalid tuples can never name a group and are removed; non-canonical
// spellings are left and counted.
func parseTuple(s string) (tuple, keys.IDForm) {
	f, e, ok := strings.Cut(s, "|")
	if !ok || f == "" || e == "" {
		return tuple{}, keys.IDInvalid
	}
	fid, ff := keys.ClassifyFlowID(f)
	eid, ef := keys.ClassifyExecutionID(e)
	switch {
	case ff == keys.IDInvalid || ef == keys.IDInvalid:
		return tuple{}, keys.IDInvalid
	case ff != keys.IDCanonical || ef != keys.IDCanonical:
		return tuple{}, keys.IDNonCanonical
	}
	return tuple{raw: s, flow: fid, downstream: eid}, keys.IDCanonical
}

// base is what both scanners share: the source, the filter, the failure
// tracker and the handling of tuples that are not ids.
type base struct {
	name      string
	interval  time.Duration
	function  string
	functions []string
	commands  []string
	failures  *scannerapi.FailureTracker

	filter scanutil.FilterSetting
}

// Info implements scannerapi.Scanner.
func (b *base) Info() scannerapi.Info {
	return scannerapi.Info{
		Name: b.name, Version: Version, APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: b.interval, DefaultBatch: 50,
		Sources: []scannerapi.CandidateSource{{Name: source, Kind: scannerapi.SourceSetScan, Key: sourceKey,
			Backlog: scannerapi.BacklogSize}},
		Commands: b.commands, Functions: b.functions, FunctionScopes: functionScopes(b.functions),
		// SREM: invalid tuples of its own source.
		KeyScopes: []scannerapi.KeyScope{{Command: "SREM", Patterns: []string{"ff:idx:{fp:*}:pending_cancel_groups"}}},
		Options:   scannerapi.FilterOptions(),
	}
}

// Configure implements scannerapi.Scanner.
func (b *base) Configure(ctx context.Context, options map[string]string) error {
	return b.filter.Configure(ctx, b.Info().Options, options)
}

// tuples admits the request's candidates: the usable tuples, and the
// intake holding the removals of invalid ones (a tuple that can never name
// a group; a non-canonical spelling is left and counted).
func (b *base) tuples(ctx context.Context, req *scannerapi.ScanRequest, res *scannerapi.ScanResult) (ts []tuple, in *scanutil.Intake[tuple]) {
	in = scanutil.Intake[tuple]{Parse: parseMember, Sources: []string{source}, Remove: []keys.IDForm{keys.IDInvalid},
		RemoveWith: "SREM", Failures: b.failures}.Begin(ctx, req, res)
	for _, c := range req.Candidates {
		if t, v := in.Admit(c); v == scanutil.Take {
			ts = append(ts, t)
		}
	}
	return ts, in
}

// parseMember is parseTuple as the intake's parser.
func parseMember(s string, _ keys.Partition) (tuple, keys.IDForm) { return parseTuple(s) }

// groupKeys are the drain and reconcile functions' KEYS.
func groupKeys(part keys.Partition, t tuple) []string {
	return []string{keys.FlowPart(part).PendingCancelGroups(), keys.FlowIn(part, t.flow).EdgeGroup(t.downstream)}
}

// failed counts a tuple's failure and feeds the failure tracker.
func (b *base) failed(res *scannerapi.ScanResult, log hclog.Logger, cycle uint64, t tuple, class scannerapi.ErrorClass, code string) {
	res.AddError(class, code, 1)
	if b.failures.RecordFailureClass(t.raw, cycle, class) {
		log.Error("persistent failure; skipping the group for a while", "tuple", t.raw, "class", class, "code", code,
			"backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}

// partitionCheck refuses partitions of another family.
func partitionCheck(req *scannerapi.ScanRequest) error {
	if req.Partition.Family != keys.FamilyFlow {
		return fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	return nil
}

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
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		class, code := scanutil.Classify(err)
		s.failed(res, log, cycle, t, class, code)
		return
	}
	if !fr.Success {
		s.failed(res, log, cycle, t, scannerapi.ErrLua, fr.Code)
		return
	}
	s.failures.RecordSuccess(t.raw)
	switch fr.Field(0) {
	case "sremmed_stale", "completed_drain":
		res.Processed++
	case "no_op":
		res.Skipped++
	default:
		s.failed(res, log, cycle, t, scannerapi.ErrServer, "unexpected_status")
	}
}

// predict is the dry-run view of one group from its fields.
func (s *Reconciler) predict(res *scannerapi.ScanResult, t tuple, r scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		res.AddError(class, code, 1)
		return
	}
	g := groupOf(r)
	switch {
	case !g.exists:
		res.Processed++
		res.Note("%s: would drop (edge group missing)", t.raw)
	case g.flag != "true":
		res.Processed++
		res.Note("%s: would drop (flag cleared)", t.raw)
	default:
		res.Skipped++
		res.Note("%s: the library decides from the siblings' states", t.raw)
	}
}

// group is an edge group's pending-cancel fields.
type group struct {
	exists        bool
	reason        string
	members, flag string
}

func groupOf(r scannerapi.Reply) group {
	var g group
	for i, e := range r.Array {
		v, _ := e.Text()
		if !e.IsNil() {
			g.exists = true
		}
		switch i {
		case 0:
			g.reason = v
		case 1:
			g.members = v
		case 2:
			g.flag = v
		}
	}
	return g
}

// keepByFilter applies the filter to the tuples' downstream executions in
// one Exec (none when the filter keeps everything).
func keepByFilter(ctx context.Context, host scannerapi.Host, f scannerapi.Filter, ts []tuple, res *scannerapi.ScanResult) ([]tuple, error) {
	if f.IsNoop() {
		return ts, nil
	}
	ms := make([]string, len(ts))
	for i, t := range ts {
		ms[i] = t.downstream.String()
	}
	keep, err := f.Keep(ctx, host, ms)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	var out []tuple
	for i, t := range ts {
		if keep[i] {
			out = append(out, t)
		} else {
			res.Skipped++
		}
	}
	return out, nil
}

// functionScopes are the scopes of the functions the scanner calls: the
// sibling-group functions take groupKeys, the cancel its own
// (scanutil.CancelScope).
func functionScopes(functions []string) []scannerapi.FunctionScope {
	var out []scannerapi.FunctionScope
	for _, fn := range functions {
		if fn == FunctionCancel {
			out = append(out, scanutil.CancelScope())
			continue
		}
		t := tuple{flow: keys.FlowIDFrom(scanutil.AnyUUID()), downstream: scanutil.AnyExecution()}
		out = append(out, scannerapi.FunctionScope{Function: fn,
			Patterns: scanutil.ScopePatterns(nil, groupKeys(keys.Partition{Family: keys.FamilyFlow}, t)...)})
	}
	return out
}
