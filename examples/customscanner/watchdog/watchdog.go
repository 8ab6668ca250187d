// Package watchdog is the delayed_watchdog scanner: it watches every lane's
// delayed set (ff:idx:{fp:N}:lane:<lane>:delayed, scored by the time each
// execution becomes due) for executions that have been due for longer than
// max_age. Something is wrong with those: the delayed promoter is not
// running or cannot keep up, or the index entry is stale (the execution
// moved on, or was deleted, and the entry stayed behind).
//
// With action "report" (the default) it only looks: one batched HMGET of
// the stuck executions' records per partition tells which of the three
// cases each is. Every stuck execution counts as processed (reported) and
// gets a note; broken entries also count as errors of class invalid (codes
// stale_entry, missing_execution), so they show in
// ffscan_scanner_errors_total. Overdue ones show in the host's own
// ffscan_scanner_oldest_due_lag_seconds{scanner="delayed_watchdog"}: how
// long the oldest due delayed execution has been waiting, the number to
// alert on. With action "promote" it repairs them through the flowfabric
// library's ff_promote_delayed, which re-validates everything inside
// Valkey: a due delayed execution is made eligible, an entry that no longer
// belongs in the delayed set is removed, anything else is left alone. The
// scanner never writes a key itself.
//
// Cost: the host fetches the oldest due entries of every lane per partition
// (one pipelined read for all partitions) and skips partitions with none;
// a partition with candidates costs one ScanPartition call plus one
// batched callback, and nothing at all when none of its due entries is
// older than max_age.
package watchdog

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

// Name is the scanner's name (scanners.delayed_watchdog in the host
// configuration).
const Name = "delayed_watchdog"

// Version is this scanner's version.
const Version = "1.0.0"

// Actions.
const (
	ActionReport  = "report"
	ActionPromote = "promote"
)

// maxNotes bounds the per-execution notes of one partition.
const maxNotes = 10

// Watchdog is the scanner. Create it with New.
type Watchdog struct {
	mu     sync.Mutex
	maxAge time.Duration
	action string
}

// New returns the scanner with its defaults (max_age 1h, report).
func New() *Watchdog { return &Watchdog{maxAge: time.Hour, action: ActionReport} }

// Info implements scannerapi.Scanner.
func (w *Watchdog) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:            Name,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyFlow,
		DefaultInterval: time.Minute,
		DefaultBatch:    100,
		Sources: []scannerapi.CandidateSource{{
			// Due entries, oldest first: the stuck ones come before the
			// merely due, so a batch always reaches them.
			Name:    "delayed",
			Kind:    scannerapi.SourceZSetDue,
			Key:     "ff:idx:{p}:lane:{lane}:delayed",
			Backlog: scannerapi.BacklogDue,
		}},
		Commands:  []string{"HMGET"},
		Functions: []string{"ff_promote_delayed"},
		// promote's calls: the execution's core, the delayed index it
		// was read from, its lane's eligible index.
		FunctionScopes: []scannerapi.FunctionScope{{Function: "ff_promote_delayed",
			Patterns: []string{"ff:exec:{fp:*}:{fp:*}:*:core", "ff:idx:{fp:*}:lane:*:delayed", "ff:idx:{fp:*}:lane:*:eligible"}}},
		Options: []scannerapi.OptionSpec{
			{Name: "max_age", Type: scannerapi.OptionDuration, Default: "1h", Description: "how long past its due time an execution counts as stuck"},
			{Name: "action", Type: scannerapi.OptionString, Default: ActionReport, Description: "report (look only) or promote (repair through ff_promote_delayed)"},
		},
	}
}

// Configure implements scannerapi.Scanner. It may be called while scans
// run (API version 2); the new options apply to the next call.
func (w *Watchdog) Configure(_ context.Context, opts map[string]string) error {
	// ParseOptions refuses options the scanner did not declare and fills
	// in the declared defaults; the checks below are this scanner's own.
	o, err := scanutil.ParseOptions(w.Info().Options, opts)
	if err != nil {
		return err
	}
	age, err := o.Duration("max_age", time.Minute)
	if err != nil {
		return fmt.Errorf("max_age %q: must be a duration of at least 1m", o.String("max_age"))
	}
	action := o.String("action")
	if action != ActionReport && action != ActionPromote {
		return fmt.Errorf("action %q: must be %s or %s", action, ActionReport, ActionPromote)
	}
	w.mu.Lock()
	w.maxAge, w.action = age, action
	w.mu.Unlock()
	return nil
}

func (w *Watchdog) settings() (time.Duration, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxAge, w.action
}

// stuck is one candidate older than max_age.
type stuck struct {
	c  scannerapi.Candidate
	id keys.ExecutionID
}

// Select splits candidates into the stuck ones (due at or before
// nowMs - maxAge, with a valid execution id), the invalid ones (not an
// execution id of this partition) and the rest (due, but not for long:
// the promoter's business). It is the scanner's decision logic, pure.
func Select(cands []scannerapi.Candidate, part keys.Partition, nowMs int64, maxAge time.Duration) (old []stuck, invalid []scannerapi.Candidate, young int) {
	limit := float64(nowMs - maxAge.Milliseconds())
	for _, c := range cands {
		if c.Score > limit {
			young++
			continue
		}
		id, err := keys.ParseExecutionID(c.Member)
		if err != nil || id.Partition() != part {
			invalid = append(invalid, c)
			continue
		}
		old = append(old, stuck{c: c, id: id})
	}
	return old, invalid, young
}

// Case says what a stuck entry's execution record shows.
type Case string

// Cases of a stuck entry.
const (
	// CaseOverdue: the execution is delayed and due: the promoter did not
	// promote it.
	CaseOverdue Case = "overdue"
	// CaseStale: the execution exists but is not delayed any more; its
	// entry should have been removed.
	CaseStale Case = "stale"
	// CaseMissing: there is no execution record at all.
	CaseMissing Case = "missing"
)

// Classify reads the HMGET of lifecycle_phase, eligibility_state.
func Classify(r scannerapi.Reply) (Case, error) {
	if r.Failed() {
		return "", r.AsError()
	}
	if r.Kind != scannerapi.KindArray || len(r.Array) != 2 {
		return "", fmt.Errorf("unexpected HMGET reply")
	}
	phase, _ := r.Array[0].Text()
	elig, _ := r.Array[1].Text()
	switch {
	case r.Array[0].IsNil() && r.Array[1].IsNil():
		return CaseMissing, nil
	case phase == "runnable" && elig == "not_eligible_until_time":
		return CaseOverdue, nil
	default:
		return CaseStale, nil
	}
}

// ScanPartition implements scannerapi.Scanner.
func (w *Watchdog) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	maxAge, action := w.settings()
	res := &scannerapi.ScanResult{More: len(req.Candidates) >= req.Batch}
	old, invalid, young := Select(req.Candidates, req.Partition, req.NowMs, maxAge)
	res.Skipped = int64(young)
	if len(invalid) > 0 {
		res.AddError(scannerapi.ErrInvalid, "bad_member", int64(len(invalid)))
	}
	if len(old) == 0 {
		return res, nil
	}
	if action == ActionPromote && !req.DryRun {
		return w.promote(ctx, host, req, old, res)
	}
	return w.report(ctx, host, old, req.NowMs, res)
}

func (w *Watchdog) report(ctx context.Context, host scannerapi.Host, old []stuck, nowMs int64, res *scannerapi.ScanResult) (*scannerapi.ScanResult, error) {
	cmds := make([]scannerapi.Command, len(old))
	for i, s := range old {
		cmds[i] = scannerapi.Command{"HMGET", keys.Exec(s.id).Core(), "lifecycle_phase", "eligibility_state"}
	}
	replies, err := host.Exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	for i, r := range replies {
		c, err := Classify(r)
		if err != nil {
			res.AddError(r.ErrClass, "read", 1)
			continue
		}
		res.Processed++
		switch c {
		case CaseStale:
			res.AddError(scannerapi.ErrInvalid, "stale_entry", 1)
		case CaseMissing:
			res.AddError(scannerapi.ErrInvalid, "missing_execution", 1)
		}
		if len(res.Notes) < maxNotes {
			res.Notes = append(res.Notes, fmt.Sprintf("%s %s in %s: due %s ago", c, old[i].c.Member, old[i].c.Key, age(nowMs, old[i].c.Score)))
		}
	}
	return res, nil
}

func (w *Watchdog) promote(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest, old []stuck, res *scannerapi.ScanResult) (*scannerapi.ScanResult, error) {
	pk := keys.FlowPart(req.Partition)
	now := strconv.FormatInt(req.NowMs, 10)
	cmds := make([]scannerapi.Command, len(old))
	for i, s := range old {
		cmds[i] = scannerapi.FCall("ff_promote_delayed",
			[]string{keys.Exec(s.id).Core(), s.c.Key, pk.LaneEligible(s.c.Lane)}, s.id.String(), now)
	}
	replies, err := host.Exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	for i, r := range replies {
		fr, err := scannerapi.ParseFunctionReply(r)
		switch {
		case err != nil:
			// A transport or server failure: retried next cycle.
			class := r.ErrClass
			if class == "" {
				class = scannerapi.ErrServer
			}
			res.AddError(class, "ff_promote_delayed", 1)
		case !fr.Success:
			res.AddError(scannerapi.ErrLua, fr.Code, 1)
		case fr.Field(0) == "not_yet_due":
			res.Skipped++
		default: // promoted, or a stale entry dropped (not_found_cleaned, not_runnable_cleaned, not_delayed_cleaned)
			res.Processed++
			if len(res.Notes) < maxNotes {
				res.Notes = append(res.Notes, fmt.Sprintf("%s %s", fr.Field(0), old[i].c.Member))
			}
		}
	}
	return res, nil
}

func age(nowMs int64, score float64) time.Duration {
	return (time.Duration(nowMs-int64(score)) * time.Millisecond).Round(time.Second)
}
