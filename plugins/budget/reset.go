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

// Scanner names and versions.
const (
	ResetName      = "budget_reset"
	ReconcilerName = "budget_reconciler"
	Version        = "1.0.0"
)

// ResetFunction is the library function budget_reset calls.
const ResetFunction = "ff_reset_budget"

// budget_reset defaults and options.
const (
	DefaultResetInterval  = 15 * time.Second
	DefaultResetBatch     = 20
	DefaultResetLookahead = 100
	// OptionLookahead bounds the due entries read past a full window whose
	// entries are backed off (0: off).
	OptionLookahead = "lookahead"
	// resetSource names budget_reset's candidate source.
	resetSource = "budget_resets"
)

// Reset is the budget_reset scanner. Its methods are safe for concurrent
// use by different partitions.
type Reset struct {
	failures *scannerapi.FailureTracker

	mu        sync.Mutex
	lookahead int
}

// NewReset returns budget_reset with default options.
func NewReset() *Reset {
	return &Reset{failures: scannerapi.NewFailureTracker(), lookahead: DefaultResetLookahead}
}

// Info implements scannerapi.Scanner.
func (s *Reset) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:            ResetName,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyBudget,
		DefaultInterval: DefaultResetInterval,
		DefaultBatch:    DefaultResetBatch,
		Sources: []scannerapi.CandidateSource{{
			Name:    resetSource,
			Kind:    scannerapi.SourceZSetDue,
			Key:     "ff:idx:{p}:budget_resets",
			Backlog: scannerapi.BacklogDue,
		}},
		// HGET: definition probe. HMGET: dry-run reads. ZRANGE: look-ahead
		// past a window of backed-off entries. ZREM: invalid members.
		Commands:       []string{"HGET", "HMGET", "ZRANGE", "ZREM"},
		KeyScopes:      []scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{"ff:idx:{b:*}:budget_resets"}}},
		Functions:      []string{ResetFunction},
		FunctionScopes: []scannerapi.FunctionScope{{Function: ResetFunction, Patterns: resetKeys()}},
		Options: []scannerapi.OptionSpec{{
			Name: OptionLookahead, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultResetLookahead),
			Description: "due entries read past a full window whose entries are backed off after failures (0: off)",
		}},
	}
}

// Configure implements scannerapi.Scanner.
func (s *Reset) Configure(ctx context.Context, options map[string]string) error {
	o, err := scanutil.ParseOptions(s.Info().Options, options)
	if err != nil {
		return err
	}
	look, err := o.Int(OptionLookahead, 0, 1_000_000)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.lookahead = look
	s.mu.Unlock()
	scannerapi.Logger(ctx).Info("configured", "lookahead", look)
	return nil
}

// resetItem is one budget to reset.
type resetItem struct {
	id keys.BudgetID
}

// resetScan is the state of one ScanPartition call: at most two waves (the
// window's resets, with the look-ahead page read first; then the resets of
// what the page admitted).
type resetScan struct {
	s     *Reset
	req   *scannerapi.ScanRequest
	part  keys.Partition
	index string
	now   string
	res   *scannerapi.ScanResult
	log   hclog.Logger
	in    *scanutil.Intake[keys.BudgetID]

	// The queues of the next wave.
	pageAt   int // > 0: read the look-ahead page, LIMIT pageAt look
	look     int
	want     int // entries the page may add: as many as the window backed off
	items    []resetItem
	inFlight int // items in the wave being sent
}

// ScanPartition implements scannerapi.Scanner.
func (s *Reset) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyBudget {
		return nil, fmt.Errorf("partition %s is not a budget partition", req.Partition)
	}
	s.mu.Lock()
	look := s.lookahead
	s.mu.Unlock()
	sc := &resetScan{
		s: s, req: req, part: req.Partition,
		index: keys.BudgetPart(req.Partition).BudgetResets(),
		now:   strconv.FormatInt(req.NowMs, 10),
		res:   &scannerapi.ScanResult{},
		log:   scannerapi.Logger(ctx),
		look:  look,
	}
	// A member that is not a canonical budget id is removed, in any
	// spelling: FlowFabric resets a non-canonical one under its canonical
	// id and leaves the odd spelling due for ever (doc.go).
	sc.in = scanutil.Intake[keys.BudgetID]{Parse: scanutil.BudgetIDs, Remove: []keys.IDForm{keys.IDInvalid, keys.IDNonCanonical},
		RemoveWith: "ZREM", Failures: s.failures}.Begin(ctx, req, sc.res)
	batch := req.Batch
	if batch <= 0 {
		batch = DefaultResetBatch
	}
	window := 0
	for _, c := range req.Candidates {
		if c.Source != resetSource {
			continue
		}
		window++
		if sc.admit(c.Member) == scanutil.BackedOff {
			sc.want++
		}
	}
	if window >= batch && sc.want > 0 && look > 0 && !req.DryRun {
		sc.pageAt = window
	}
	waves, err := scanutil.Waves(ctx, host, 0, sc.build)
	if err != nil {
		if waves == 0 {
			return nil, fmt.Errorf("exec: %w", err)
		}
		// The window's resets are done; count what the page could not do
		// and let the host come back.
		sc.res.AddError(scannerapi.ErrTransport, "exec", int64(sc.inFlight))
		sc.res.More = true
		return sc.res, nil
	}
	if window >= batch && sc.res.Processed > 0 && !req.DryRun {
		sc.res.More = true // the due range may hold more than one window
	}
	return sc.res, nil
}

// admit queues one member: a budget to reset or an entry to remove.
func (sc *resetScan) admit(member string) scanutil.Verdict {
	id, v := sc.in.Admit(scannerapi.Candidate{Key: sc.index, Member: member})
	if v == scanutil.Take {
		sc.items = append(sc.items, resetItem{id: id})
	}
	return v
}

// build fills a wave: the look-ahead page first (before anything in the
// wave moves entries, so its offset, the window's size, is exact), then
// the ZREMs, then per budget the definition probe and its FCALL (in a dry
// run, one HMGET).
func (sc *resetScan) build(b *scanutil.Batch) {
	if sc.pageAt > 0 {
		b.Add(func(r []scannerapi.Reply) { sc.absorbPage(r[0]) },
			scannerapi.Command{"ZRANGE", sc.index, "-inf", sc.now, "BYSCORE", "LIMIT", strconv.Itoa(sc.pageAt), strconv.Itoa(sc.look)})
		sc.pageAt = 0
	}
	sc.in.QueueRemovals(b)
	items := sc.items
	sc.items, sc.inFlight = nil, len(items)
	for _, it := range items {
		bk := keys.BudgetIn(sc.part, it.id)
		if sc.req.DryRun {
			b.Add(func(r []scannerapi.Reply) { sc.predict(it, r[0]) },
				scannerapi.Command{"HMGET", bk.Definition(), "budget_id", "reset_interval_ms"})
			continue
		}
		b.Add(func(r []scannerapi.Reply) { sc.record(it, r[0], r[1]) },
			scannerapi.Command{"HGET", bk.Definition(), "budget_id"},
			scannerapi.FCall(ResetFunction, []string{bk.Definition(), bk.Usage(), sc.index}, it.id.String(), sc.now))
	}
}

// record accounts for one budget's probe and FCALL replies. A call that
// got no reply (class transport: a connection, not the budget) is not
// held against the budget by the failure tracker.
func (sc *resetScan) record(it resetItem, probe, call scannerapi.Reply) {
	bid := it.id.String()
	o := classifyReset(call)
	switch o.kind {
	case resetDone:
		sc.s.failures.RecordSuccess(bid)
		if v, ok := probe.Text(); ok && v == "" {
			// The definition was gone before the call: an orphan entry.
			sc.res.AddError(scannerapi.ErrInvalid, "definition_missing", 1)
			sc.log.Warn("a due budget has no definition; its reset-index entry was dropped", "budget_id", bid)
			return
		}
		sc.res.Processed++
		if o.nextReset == 0 {
			sc.log.Debug("budget reset and unscheduled (reset_interval_ms is 0)", "budget_id", bid)
		}
	case resetLuaError:
		sc.res.AddError(o.class, o.code, 1)
		sc.log.Warn("ff_reset_budget refused", "budget_id", bid, "code", o.code)
	case resetFailed:
		sc.res.AddError(o.class, o.code, 1)
		if sc.s.failures.RecordFailureClass(bid, sc.req.Cycle, o.class) {
			sc.log.Error("persistent ff_reset_budget failure; skipping the budget for a while",
				"budget_id", bid, "class", o.class, "code", o.code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
		}
	}
}

// predict accounts for one budget in a dry run from HMGET definition
// budget_id reset_interval_ms.
func (sc *resetScan) predict(it resetItem, r scannerapi.Reply) {
	bid := it.id.String()
	if err := r.AsError(); err != nil {
		sc.res.AddError(failureClass(err), failureCode(err, "read_definition"), 1)
		return
	}
	var f []string
	for _, e := range r.Array {
		s, _ := e.Text()
		f = append(f, s)
	}
	if len(f) != 2 {
		sc.res.AddError(scannerapi.ErrServer, "malformed_reply", 1)
		return
	}
	if f[0] == "" {
		sc.res.AddError(scannerapi.ErrInvalid, "definition_missing", 1)
		sc.res.Note("%s: definition missing; the library would drop its index entry", bid)
		return
	}
	sc.res.Processed++
	if iv, _ := strconv.ParseInt(f[1], 10, 64); iv > 0 {
		sc.res.Note("would reset %s and reschedule it in %dms", bid, iv)
	} else {
		sc.res.Note("would reset %s and unschedule it", bid)
	}
}

// absorbPage queues, for the next wave, up to want budgets of the
// look-ahead page (and the removal of the entries that are not budget ids
// met on the way).
func (sc *resetScan) absorbPage(r scannerapi.Reply) {
	if err := r.AsError(); err != nil {
		sc.res.AddError(failureClass(err), "lookahead_read", 1)
		return
	}
	for _, e := range r.Array {
		if len(sc.items) >= sc.want {
			break
		}
		if m, ok := e.Text(); ok {
			sc.admit(m)
		}
	}
}

// resetKeys are the key patterns of the scanner's calls of ResetFunction
// (enqueue): the budget's definition and usage and its partition's reset
// index, for any budget.
func resetKeys() []string {
	part := keys.Partition{Family: keys.FamilyBudget}
	bk := keys.BudgetIn(part, keys.BudgetIDFrom(scanutil.AnyUUID()))
	return scanutil.ScopePatterns(nil, bk.Definition(), bk.Usage(), keys.BudgetPart(part).BudgetResets())
}
