// Package depreconciler is the dependency_reconciler scanner (scanners.md
// 8.3): the safety net of push-based DAG promotion. When a flow member
// finishes, the completion listener resolves its outgoing edges at once;
// a message lost on pub/sub (no subscriber, a reconnect), a member finished
// before its flow_id was stamped, a cascade cut short or an edge added by
// an operator leaves a child blocked on dependencies whose parents are
// done. This scanner finds such children and resolves them.
//
// # Source and rotation
//
// zset_rotate over ff:idx:{fp:N}:lane:<lane>:blocked:dependencies, for
// every lane the host knows: each cycle the host reads the next window of
// "batch" members by rank (per partition and lane, wrapping at the end), so
// the whole blocked set is visited over successive cycles. FlowFabric
// always read the 50 oldest, so 50 children waiting on long-running parents
// hid every newer child whose parents were done (pitfall P3); here an old
// stuck child costs one visit per rotation and never blocks anyone.
// Interval 15 s, batch 50, backlog = the blocked sets' size.
//
// # Per scan
//
//  1. Members that are not execution ids in any spelling are removed (ZREM,
//     carried by the scan's first batch: no round trip of their own) and
//     counted (class invalid, code invalid_member); a non-canonical
//     spelling is counted (non_canonical_member) and left; an id of
//     another partition is counted (foreign_member) and left.
//  2. Children in failure backoff are skipped.
//  3. With a namespace or instance-tag filter, the downstream (blocked)
//     execution must pass it: one batched read for all children.
//  4. The children go, all together, through sdk/depresolve's
//     ReconcileChildren, the same mechanism the completion listener uses:
//     every unresolved edge of every child (FlowFabric: the first 20), the
//     upstream cores read at their own partition in one batch, the real
//     terminal outcome, the server's clock, replies classified by status;
//     an all_of child is released only when every parent succeeded, a
//     failed parent makes the child impossible and skips it, and the skip
//     is cascaded to the child's own descendants at once. A child with no
//     unresolved edge that is still blocked is released.
//
// # Results
//
// Processed counts edges resolved (satisfied, impossible, already
// resolved, or counted by an any_of/quorum group) plus blocked children
// released with no edge left, the way depresolve.Result.AddTo counts them.
// Skipped counts children filtered out or backed off, and edges whose
// upstream has not finished. Errors carry depresolve's classes and codes
// (transport, server, refused, lua with the library's code, data). More is
// reported when a window was full and something was resolved, so the host
// drains a burst of lost completions within the cycle.
//
// A command that gets no reply or a server error (a wrong-type key) is
// attributed to the child it concerns (its own keys, or an upstream it
// waits on); each such child feeds a FailureTracker: three scans in a row
// and it is skipped for ten cycles. A batch the host could not run at all
// fails the call (the host retries the partition and keeps its cursor).
//
// Options: namespace, instance_tag (the execution filter).
//
// Dry run: everything is read as usual, every FCALL is held back; Processed
// counts the FCALLs that would have been sent, Notes list them.
package depreconciler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name is the scanner's name.
const Name = "dependency_reconciler"

// Version is the scanner's version.
const Version = "1.0.0"

// Defaults.
const (
	DefaultInterval = 15 * time.Second
	DefaultBatch    = 50
	// sourceName names the candidate source.
	sourceName = "blocked_dependencies"
)

// Scanner is the dependency_reconciler. Its methods are safe for
// concurrent use by different partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker

	filter scanutil.FilterSetting
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{failures: scannerapi.NewFailureTracker()}
}

// Info implements scannerapi.Scanner.
func (s *Scanner) Info() scannerapi.Info {
	cmds := depresolve.Commands()
	for _, c := range append(scannerapi.FilterCommands(), "ZREM") {
		if !slices.Contains(cmds, c) {
			cmds = append(cmds, c)
		}
	}
	src := scannerapi.CandidateSource{
		Name:    sourceName,
		Kind:    scannerapi.SourceZSetRotate,
		Key:     "ff:idx:{p}:lane:{lane}:blocked:dependencies",
		Backlog: scannerapi.BacklogSize,
	}
	return scannerapi.Info{
		Name:            Name,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyFlow,
		DefaultInterval: DefaultInterval,
		DefaultBatch:    DefaultBatch,
		Sources:         []scannerapi.CandidateSource{src},
		// depresolve's reads (TIME, HGET, HMGET, SMEMBERS), the filter's
		// HGET, ZREM of invalid members.
		Commands:       cmds,
		KeyScopes:      []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{src.KeyPattern()}}},
		Functions:      depresolve.Functions(),
		FunctionScopes: depresolve.FunctionScopes(),
		Options:        scannerapi.FilterOptions(),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	return s.filter.Configure(ctx, s.Info().Options, options)
}

// scan is the state of one ScanPartition call.
type scan struct {
	s      *Scanner
	req    *scannerapi.ScanRequest
	res    *scannerapi.ScanResult
	log    hclog.Logger
	x      *scanExec
	window map[string]int // candidates per blocked set (lane)
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	sc := &scan{s: s, req: req, res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx),
		x: newScanExec(host, req.DryRun), window: map[string]int{}}
	ids, err := sc.keep(ctx, sc.admit(ctx))
	if err != nil {
		return nil, err
	}
	out, err := sc.reconcile(ctx, ids)
	if err != nil && out.Resolved+out.Promoted == 0 {
		return nil, fmt.Errorf("reconcile %d children: %w", len(ids), err)
	}
	if err != nil {
		// Some levels were done; count the rest and let the host come back.
		sc.res.AddError(scannerapi.ErrTransport, "exec", 1)
		sc.res.More = true
	}
	sc.flush(ctx)
	sc.count(out)
	if err == nil {
		sc.track(ids) // not for a batch that could not run
	}
	sc.more()
	if sc.res.Processed > 0 {
		sc.log.Debug("dependencies reconciled", "partition", req.Partition.Tag(), "children", len(ids),
			"satisfied", out.Satisfied, "impossible", out.Impossible, "skipped", out.Skipped, "promoted", out.Promoted)
	}
	return sc.res, nil
}

// intake is the scanner's rule for candidates, the scan's and Explain's:
// its blocked:dependencies sets only; garbage is removed, an id of
// another partition or spelling left.
func (s *Scanner) intake() scanutil.Intake[keys.ExecutionID] {
	return scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Sources: []string{sourceName},
		Remove: []keys.IDForm{keys.IDInvalid}, Failures: s.failures}
}

// admit classifies the members of every lane's window (steps 1-2): the
// children to reconcile; the removal of invalid members rides along with
// the scan's first batch.
func (sc *scan) admit(ctx context.Context) []keys.ExecutionID {
	var ids []keys.ExecutionID
	in := sc.s.intake().Begin(ctx, sc.req, sc.res)
	for _, c := range sc.req.Candidates {
		id, v := in.Admit(c)
		if v != scanutil.OtherSource {
			sc.window[c.Key]++
		}
		switch v {
		case scanutil.Take:
			ids = append(ids, id)
		case scanutil.Remove:
			sc.x.queue(scannerapi.Command{"ZREM", c.Key, c.Member})
		}
	}
	return ids
}

// keep applies the filter to the downstream executions (step 3).
func (sc *scan) keep(ctx context.Context, ids []keys.ExecutionID) ([]keys.ExecutionID, error) {
	filter := sc.s.filter.Get()
	if filter.IsNoop() || len(ids) == 0 {
		return ids, nil
	}
	members := make([]string, len(ids))
	for i, id := range ids {
		members[i] = id.String()
	}
	keep, err := filter.Keep(ctx, sc.x, members)
	if err != nil {
		return nil, err
	}
	kept := ids[:0]
	for i, id := range ids {
		if keep[i] {
			kept = append(kept, id)
		} else {
			sc.res.Skipped++
		}
	}
	return kept, nil
}

// reconcile hands the children to depresolve (step 4).
func (sc *scan) reconcile(ctx context.Context, ids []keys.ExecutionID) (depresolve.Result, error) {
	sc.x.watch(ids)
	return depresolve.New(sc.x, depresolve.Options{Logger: sc.log}).ReconcileChildren(ctx, ids)
}

// flush sends what is still queued (removals when nothing else was sent)
// and reports the removals that failed: they are retried when read again.
func (sc *scan) flush(ctx context.Context) {
	if err := sc.x.flush(ctx); err != nil {
		sc.res.AddError(scannerapi.ErrTransport, "exec", 1)
	}
	for _, rep := range sc.x.queuedReplies() {
		if e := rep.AsError(); e != nil {
			sc.log.Warn("ZREM of an invalid member failed; retried when it is read again", "error", e)
		}
	}
}

// count adds depresolve's result to the scan's; a dry run counts and notes
// the calls it held back instead.
func (sc *scan) count(out depresolve.Result) {
	if sc.req.DryRun {
		held := sc.x.held()
		out.Errors = withoutHeldBack(out.Errors, int64(len(held)))
		for _, c := range held {
			sc.res.Note("would call %s", describeCall(c))
		}
		sc.res.Processed += int64(len(held))
		for _, e := range out.Errors {
			sc.res.AddError(e.Class, e.Code, e.Count)
		}
	} else {
		out.AddTo(sc.res)
	}
	sc.res.Skipped += out.NotTerminal
	if len(out.Left) > 0 {
		sc.log.Warn("skip cascade reached its depth limit; the next passes continue it", "left", len(out.Left))
	}
}

// track feeds the failure tracker, per child.
func (sc *scan) track(ids []keys.ExecutionID) {
	for _, id := range ids {
		eid := id.String()
		class, failed := sc.x.failure(id)
		if !failed {
			sc.s.failures.RecordSuccess(eid)
			continue
		}
		if sc.s.failures.RecordFailureClass(eid, sc.req.Cycle, class) {
			sc.log.Error("reconciling this child keeps failing; skipping it for a while",
				"execution_id", eid, "class", class, "backoff_cycles", scannerapi.DefaultBackoffCycles)
		}
	}
}

// more asks the host to come back when a lane's window was full and
// something was resolved: a burst of lost completions drains within the
// cycle.
func (sc *scan) more() {
	if sc.req.DryRun || sc.res.Processed == 0 || sc.req.Batch <= 0 {
		return
	}
	for _, n := range sc.window {
		if n >= sc.req.Batch {
			sc.res.More = true
		}
	}
}

// describeCall renders a held-back FCALL for a dry-run note: the function,
// its child and its arguments.
func describeCall(c scannerapi.Command) string {
	if len(c) < 3 {
		return fmt.Sprint(c)
	}
	fn, ks, args, ok := scannerapi.ParseFCall(c)
	if !ok {
		return fmt.Sprint(c)
	}
	child := ""
	if len(ks) > 0 {
		if id, ok := execOfKey(ks[0]); ok {
			child = id.String()
		}
	}
	return fmt.Sprintf("%s on %s %v", fn, child, args)
}
