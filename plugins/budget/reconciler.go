package budget

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// budget_reconciler defaults and options.
const (
	DefaultReconcilerInterval = 30 * time.Second
	DefaultReconcilerBatch    = 100
	// OptionPruneOrphans turns the removal of ids whose definition is
	// gone on or off.
	OptionPruneOrphans = "prune_orphans"
	// reconcilerSource names budget_reconciler's candidate source.
	reconcilerSource = "budget_policies"
)

// Reconciler is the budget_reconciler scanner. Its methods are safe for
// concurrent use by different partitions.
type Reconciler struct {
	mu    sync.Mutex
	prune bool
}

// NewReconciler returns budget_reconciler with default options.
func NewReconciler() *Reconciler { return &Reconciler{prune: true} }

// Info implements scannerapi.Scanner.
func (s *Reconciler) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:            ReconcilerName,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyBudget,
		DefaultInterval: DefaultReconcilerInterval,
		DefaultBatch:    DefaultReconcilerBatch,
		Sources: []scannerapi.CandidateSource{{
			Name:    reconcilerSource,
			Kind:    scannerapi.SourceSetScan,
			Key:     "ff:idx:{p}:budget_policies",
			Backlog: scannerapi.BacklogSize,
		}},
		// HGETALL: the three hashes of a budget. HSETNX/HDEL: the marker.
		// SREM/ZREM: orphans and invalid members.
		Commands: []string{"HGETALL", "HSETNX", "HDEL", "SREM", "ZREM"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "HSETNX", Patterns: []string{"ff:budget:{b:*}:*:usage"}},
			{Command: "HDEL", Patterns: []string{"ff:budget:{b:*}:*:usage"}},
			{Command: "SREM", Patterns: []string{"ff:idx:{b:*}:budget_policies"}},
			{Command: "ZREM", Patterns: []string{"ff:idx:{b:*}:budget_resets"}},
		},
		Options: []scannerapi.OptionSpec{{
			Name: OptionPruneOrphans, Type: scannerapi.OptionBool, Default: "true",
			Description: "remove ids whose budget definition is gone from budget_policies and budget_resets",
		}},
	}
}

// Configure implements scannerapi.Scanner.
func (s *Reconciler) Configure(ctx context.Context, options map[string]string) error {
	o, err := scanutil.ParseOptions(s.Info().Options, options)
	if err != nil {
		return err
	}
	prune, err := o.Bool(OptionPruneOrphans)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.prune = prune
	s.mu.Unlock()
	scannerapi.Logger(ctx).Info("configured", "prune_orphans", prune)
	return nil
}

// reconcileScan is the state of one ScanPartition call: one Exec of reads
// (and the removal of members that are not budget ids), then one Exec of
// the writes they call for.
type reconcileScan struct {
	req      *scannerapi.ScanRequest
	res      *scannerapi.ScanResult
	log      hclog.Logger
	prune    bool
	bp       keys.BudgetPartKeys
	policies string
	now      string
	writes   scanutil.Batch
}

// ScanPartition implements scannerapi.Scanner.
func (s *Reconciler) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyBudget {
		return nil, fmt.Errorf("partition %s is not a budget partition", req.Partition)
	}
	s.mu.Lock()
	prune := s.prune
	s.mu.Unlock()
	bp := keys.BudgetPart(req.Partition)
	sc := &reconcileScan{req: req, res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx), prune: prune,
		bp: bp, policies: bp.BudgetPolicies(), now: strconv.FormatInt(req.NowMs, 10)}

	var reads scanutil.Batch
	members := 0
	in := scanutil.Intake[keys.BudgetID]{Parse: scanutil.BudgetIDs, Sources: []string{reconcilerSource},
		Remove: []keys.IDForm{keys.IDInvalid}, RemoveWith: "SREM"}.Begin(ctx, req, sc.res)
	for _, c := range req.Candidates {
		id, v := in.Admit(c)
		if v != scanutil.OtherSource {
			members++
		}
		if v == scanutil.Take {
			sc.read(&reads, id)
		}
	}
	in.QueueRemovals(&reads)
	if reads.Len() == 0 {
		return sc.res, nil
	}
	if err := reads.Exec(ctx, host); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	if req.Batch > 0 && members >= req.Batch && !req.DryRun {
		sc.res.More = true
	}
	if err := sc.writes.Exec(ctx, host); err != nil {
		// The reads are done; the writes are retried next sweep.
		sc.res.AddError(scannerapi.ErrTransport, "exec", int64(sc.writes.Len()))
	}
	return sc.res, nil
}

// read adds a budget's three hashes to the reads; their handler decides
// and queues the write.
func (sc *reconcileScan) read(b *scanutil.Batch, id keys.BudgetID) {
	bk := keys.BudgetIn(sc.req.Partition, id)
	cmds := []scannerapi.Command{{"HGETALL", bk.Definition()}, {"HGETALL", bk.Usage()}, {"HGETALL", bk.Limits()}}
	b.Add(func(r []scannerapi.Reply) {
		hashes := make([]map[string]string, len(r))
		for j, what := range []string{"read_definition", "read_usage", "read_limits"} {
			h, err := hashOf(r[j])
			if err != nil {
				sc.res.AddError(failureClass(err), failureCode(err, what), 1)
				sc.log.Warn("budget read failed; budget left as it is", "budget_id", id.String(), "key", cmds[j][1], "error", err)
				return
			}
			hashes[j] = h
		}
		sc.act(id, bk, decideBudget(hashes[0], hashes[1], hashes[2]))
	}, cmds...)
}

// act queues the write a decision calls for (a dry run notes it).
func (sc *reconcileScan) act(id keys.BudgetID, bk keys.BudgetKeys, act action) {
	bid := id.String()
	var what string
	var cmd scannerapi.Command
	switch act {
	case actResetting, actNoLimits:
		sc.res.Skipped++
		return
	case actPrune:
		if !sc.prune {
			sc.res.Skipped++
			sc.res.Note("%s: definition gone; pruning is off", bid)
			return
		}
		what, cmd = "prune "+bid+" (definition gone)", scannerapi.Command{"SREM", sc.policies, bid}
	case actMark:
		what, cmd = "mark "+bid+" breached", scannerapi.Command{"HSETNX", bk.Usage(), BreachedAtField, sc.now}
	case actClear:
		what, cmd = "clear the breach marker of "+bid, scannerapi.Command{"HDEL", bk.Usage(), BreachedAtField}
	default:
		return
	}
	if sc.req.DryRun {
		sc.res.Processed++
		sc.res.Note("would %s", what)
		return
	}
	sc.write(cmd, bid, act)
	if act == actPrune {
		// FlowFabric prunes only the policies set; the reset index entry
		// would make budget_reset recreate a stray definition.
		sc.write(scannerapi.Command{"ZREM", sc.bp.BudgetResets(), bid}, bid, actNone)
	}
}

// write queues one write and how to account for its reply: HSETNX, HDEL
// and SREM answer 1 when they changed something, 0 when someone else got
// there first; the ZREM that goes with a prune is not counted.
func (sc *reconcileScan) write(cmd scannerapi.Command, bid string, kind action) {
	sc.writes.Add(func(r []scannerapi.Reply) {
		if err := r[0].AsError(); err != nil {
			sc.res.AddError(failureClass(err), failureCode(err, "write_"+kind.String()), 1)
			sc.log.Warn("budget write failed", "budget_id", bid, "command", cmd[0], "error", err)
			return
		}
		if kind != actNone && r[0].Kind == scannerapi.KindInt && r[0].Int == 1 {
			sc.res.Processed++
			sc.log.Info("budget reconciled", "budget_id", bid, "action", kind.String())
		}
	}, cmd)
}
