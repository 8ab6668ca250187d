package observers

import (
	"context"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// IndexReconcilerName is index_reconciler's name.
const IndexReconcilerName = "index_reconciler"

// IndexReconciler is index_reconciler: detect only. Processed counts the
// executions missing from the index their state names (and the members of
// all_executions whose core is gone); each is named in a note. Skipped
// counts the consistent ones. Safe for concurrent use by partitions.
type IndexReconciler struct {
	filter scanutil.FilterSetting
}

// NewIndexReconciler returns index_reconciler.
func NewIndexReconciler() *IndexReconciler { return &IndexReconciler{} }

// Info implements scannerapi.Scanner.
func (s *IndexReconciler) Info() scannerapi.Info {
	return scannerapi.Info{
		Name: IndexReconcilerName, Version: Version, APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: 45 * time.Second, DefaultBatch: 100,
		Sources: []scannerapi.CandidateSource{{Name: "all_executions", Kind: scannerapi.SourceSetScan,
			Key: "ff:idx:{p}:all_executions", Backlog: scannerapi.BacklogSize}},
		// HMGET: cores. HGET: the filter. ZSCORE: the expected index.
		Commands: []string{"HMGET", "HGET", "ZSCORE"},
		Options:  scannerapi.FilterOptions(),
	}
}

// Configure implements scannerapi.Scanner.
func (s *IndexReconciler) Configure(ctx context.Context, options map[string]string) error {
	return s.filter.Configure(ctx, s.Info().Options, options)
}

// ScanPartition implements scannerapi.Scanner: one Exec of core (and
// filter) reads, one of index checks with a second core read.
func (s *IndexReconciler) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	filter := s.filter.Get()
	res := &scannerapi.ScanResult{}
	pk := keys.FlowPart(req.Partition)
	type check struct {
		id       keys.ExecutionID
		expected string
		state    []string
	}
	var checks []check
	var reads scanutil.Batch
	in := indexIntake.Begin(ctx, req, res)
	for _, c := range req.Candidates {
		id, v := in.Admit(c)
		if v != scanutil.Take {
			continue
		}
		nf := len(filter.ReadCommands(id))
		reads.Add(func(r []scannerapi.Reply) {
			core, fr := r[0], r[1:1+nf]
			if core.Failed() {
				class, code := scanutil.ClassifyReply(core)
				res.AddError(class, code, 1)
				return
			}
			f := make([]string, len(stateFields))
			for i := range f {
				if i < len(core.Array) {
					f[i], _ = core.Array[i].Text()
				}
			}
			if f[0] == "" {
				res.Processed++
				res.Note("%s: in all_executions, core missing", id)
				return
			}
			if !filter.IsNoop() && !filter.Decide(fr) {
				res.Skipped++
				return
			}
			exp := ExpectedIndex(pk, f[1], f[2], f[3], f[4])
			if exp == "" {
				res.Skipped++
				return
			}
			checks = append(checks, check{id: id, expected: exp, state: f[1:]})
		}, append([]scannerapi.Command{append(scannerapi.Command{"HMGET", keys.Exec(id).Core()}, stateFields...)},
			filter.ReadCommands(id)...)...)
	}
	if err := reads.Exec(ctx, host); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	var zs scanutil.Batch
	for _, c := range checks {
		c := c
		zs.Add(func(r []scannerapi.Reply) {
			switch {
			case r[0].Failed():
				class, code := scanutil.ClassifyReply(r[0])
				res.AddError(class, code, 1)
			case r[0].IsNil() && !sameState(r[1], c.state):
				// It moved on between the reads (e.g. a worker claimed
				// it): not an inconsistency.
				res.Skipped++
			case r[0].IsNil():
				res.Processed++
				res.Note("%s: %v but not in %s", c.id, c.state, c.expected)
				scannerapi.Logger(ctx).Warn("execution missing from the index its state names", "execution_id", c.id.String(),
					"lifecycle_phase", c.state[0], "eligibility_state", c.state[1], "ownership_state", c.state[2], "index", c.expected)
			default:
				res.Skipped++
			}
		}, scannerapi.Command{"ZSCORE", c.expected, c.id.String()},
			// Read again after the index: a miss counts only if the state
			// it was checked against still holds.
			append(scannerapi.Command{"HMGET", keys.Exec(c.id).Core()}, stateFields...))
	}
	if err := zs.Exec(ctx, host); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return res, nil
}

// indexIntake is the reconciler's rule for candidates, the scan's and
// Explain's. Detect only: members that are not ids of this partition are
// counted and left.
var indexIntake = scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn}
