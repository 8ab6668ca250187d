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
