package budget

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

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

// write is one pending write and how to account for its reply.
type write struct {
	cmd  scannerapi.Command
	bid  string
	kind action // actMark, actClear or actPrune
}

// ScanPartition implements scannerapi.Scanner.
func (s *Reconciler) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyBudget {
		return nil, fmt.Errorf("partition %s is not a budget partition", req.Partition)
	}
	s.mu.Lock()
	prune := s.prune
	s.mu.Unlock()
	log := scannerapi.Logger(ctx)
	res := &scannerapi.ScanResult{}
	bp := keys.BudgetPart(req.Partition)
	policies := bp.BudgetPolicies()

	// One Exec: SREM of invalid members, then three HGETALLs per budget.
	var cmds []scannerapi.Command
	var ids []keys.BudgetID
	members := 0
	in := scanutil.Intake[keys.BudgetID]{Parse: scanutil.BudgetIDs, Sources: []string{reconcilerSource},
		Remove: []keys.IDForm{keys.IDInvalid}}.Begin(ctx, req, res)
	for _, c := range req.Candidates {
		id, v := in.Admit(c)
		if v != scanutil.OtherSource {
			members++
		}
		switch v {
		case scanutil.Take:
			ids = append(ids, id)
		case scanutil.Remove:
			cmds = append(cmds, scannerapi.Command{"SREM", policies, c.Member})
		}
	}
	removals := len(cmds)
	for _, id := range ids {
		bk := keys.BudgetIn(req.Partition, id)
		cmds = append(cmds,
			scannerapi.Command{"HGETALL", bk.Definition()},
			scannerapi.Command{"HGETALL", bk.Usage()},
			scannerapi.Command{"HGETALL", bk.Limits()})
	}
	if len(cmds) == 0 {
		return res, nil
	}
	replies, err := host.Exec(ctx, cmds)
	if err == nil && len(replies) != len(cmds) {
		err = fmt.Errorf("host answered %d replies to %d commands", len(replies), len(cmds))
	}
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}

	now := strconv.FormatInt(req.NowMs, 10)
	var writes []write
	for i, id := range ids {
		bid := id.String()
		bk := keys.BudgetIn(req.Partition, id)
		at := removals + 3*i
		hashes := make([]map[string]string, 3)
		failed := false
		for j, what := range []string{"read_definition", "read_usage", "read_limits"} {
			h, err := hashOf(replies[at+j])
			if err != nil {
				res.AddError(failureClass(err), failureCode(err, what), 1)
				log.Warn("budget read failed; budget left as it is", "budget_id", bid, "key", cmds[at+j][1], "error", err)
				failed = true
				break
			}
			hashes[j] = h
		}
		if failed {
			continue
		}
		switch act := decideBudget(hashes[0], hashes[1], hashes[2]); act {
		case actPrune:
			if !prune {
				res.Skipped++
				res.Note("%s: definition gone; pruning is off", bid)
				continue
			}
			if req.DryRun {
				res.Processed++
				res.Note("would prune %s (definition gone)", bid)
				continue
			}
			writes = append(writes,
				write{cmd: scannerapi.Command{"SREM", policies, bid}, bid: bid, kind: actPrune},
				write{cmd: scannerapi.Command{"ZREM", bp.BudgetResets(), bid}, bid: bid, kind: actNone})
		case actResetting, actNoLimits:
			res.Skipped++
		case actMark:
			if req.DryRun {
				res.Processed++
				res.Note("would mark %s breached", bid)
				continue
			}
			writes = append(writes, write{cmd: scannerapi.Command{"HSETNX", bk.Usage(), BreachedAtField, now}, bid: bid, kind: actMark})
		case actClear:
			if req.DryRun {
				res.Processed++
				res.Note("would clear the breach marker of %s", bid)
				continue
			}
			writes = append(writes, write{cmd: scannerapi.Command{"HDEL", bk.Usage(), BreachedAtField}, bid: bid, kind: actClear})
		}
	}
	if req.Batch > 0 && members >= req.Batch && !req.DryRun {
		res.More = true
	}
	if len(writes) == 0 {
		return res, nil
	}
	wcmds := make([]scannerapi.Command, len(writes))
	for i, w := range writes {
		wcmds[i] = w.cmd
	}
	wreps, err := host.Exec(ctx, wcmds)
	if err == nil && len(wreps) != len(wcmds) {
		err = fmt.Errorf("host answered %d replies to %d commands", len(wreps), len(wcmds))
	}
	if err != nil {
		// The reads are done; the writes are retried next sweep.
		res.AddError(scannerapi.ErrTransport, "exec", int64(len(writes)))
		return res, nil
	}
	for i, w := range writes {
		r := wreps[i]
		if err := r.AsError(); err != nil {
			res.AddError(failureClass(err), failureCode(err, "write_"+w.kind.String()), 1)
			log.Warn("budget write failed", "budget_id", w.bid, "command", w.cmd[0], "error", err)
			continue
		}
		if w.kind == actNone {
			continue
		}
		// HSETNX, HDEL and SREM answer 1 when they changed something; 0
		// means someone else got there first.
		if r.Kind == scannerapi.KindInt && r.Int == 1 {
			res.Processed++
			log.Info("budget reconciled", "budget_id", w.bid, "action", w.kind.String())
		}
	}
	return res, nil
}
