// Package quota is the quota_reconciler scanner (scanners.md §9.3): it
// keeps each quota policy's bookkeeping true to what it meters.
//
//   - The sliding window loses the admissions older than the window, as
//     the library's own admission check trims it ((-inf, now - window]),
//     so an idle quota does not carry a full window forever.
//   - The concurrency counter is set to the number of admitted executions
//     that are still running, and executions that ended (or were purged)
//     leave the admitted set: a worker that died before releasing its
//     admission no longer holds a slot forever.
//
// Running means the execution's core exists and is not terminal.
// FlowFabric counts admission guards instead, whose TTL is the rate
// window, so an execution that runs longer than the window silently stops
// counting and more admissions than the cap get through (P10).
//
// The host reads each quota partition's quota_policies set, one SSCAN
// step per cycle. Per policy: one wave reads the definition; one trims the
// window and reads the admitted set and the counter; one reads the
// admitted executions' phases; one removes the ended ones and corrects the
// counter. A policy id whose definition is gone is pruned from the index.
package quota

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name and version.
const (
	Name    = "quota_reconciler"
	Version = "1.0.0"
	source  = "quota_policies"
)

// Scanner is quota_reconciler. Safe for concurrent use by partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker
	intake   scanutil.Intake[keys.QuotaID]
}

// New returns the scanner. quota_policies members that are not quota ids
// are pruned; a non-canonical spelling is left.
func New() *Scanner {
	f := scannerapi.NewFailureTracker()
	return &Scanner{failures: f, intake: scanutil.Intake[keys.QuotaID]{Parse: scanutil.QuotaIDs, Sources: []string{source},
		Remove: []keys.IDForm{keys.IDInvalid}, RemoveWith: "SREM", Failures: f}}
}

// Info implements scannerapi.Scanner.
func (s *Scanner) Info() scannerapi.Info {
	return scannerapi.Info{
		Name: Name, Version: Version, APIVersion: scannerapi.APIVersion, Family: keys.FamilyQuota,
		DefaultInterval: 30 * time.Second, DefaultBatch: 50,
		Sources: []scannerapi.CandidateSource{{Name: source, Kind: scannerapi.SourceSetScan,
			Key: "ff:idx:{p}:quota_policies", Backlog: scannerapi.BacklogSize}},
		// HMGET: definitions. ZREMRANGEBYSCORE: the window trim. SMEMBERS,
		// GET: admitted set and counter. HGET: admitted executions'
		// phases. SREM: ended admissions, pruned ids. SET: the counter.
		Commands: []string{"HMGET", "ZREMRANGEBYSCORE", "SMEMBERS", "GET", "HGET", "SREM", "SET"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "ZREMRANGEBYSCORE", Patterns: []string{"ff:quota:{q:*}:*:window:*"}},
			{Command: "SREM", Patterns: []string{"ff:idx:{q:*}:quota_policies", "ff:quota:{q:*}:*:admitted_set"}},
			{Command: "SET", Patterns: []string{"ff:quota:{q:*}:*:concurrency"}},
		},
	}
}

// Configure implements scannerapi.Scanner (no options).
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	_, err := scanutil.ParseOptions(s.Info().Options, options)
	return err
}

// policy is one quota policy on its way through the waves.
type policy struct {
	raw       string
	qk        keys.QuotaKeys
	windowSec float64
	cap       int64
	admitted  []string
	counter   int64
	live      int64
	ended     []string
	worked    bool
	failed    bool
}

type scan struct {
	s   *Scanner
	req *scannerapi.ScanRequest
	res *scannerapi.ScanResult
	log hclog.Logger

	toDef, toBook, toPhase, toFix []*policy
	in                            *scanutil.Intake[keys.QuotaID]
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyQuota {
		return nil, fmt.Errorf("partition %s is not a quota partition", req.Partition)
	}
	sc := &scan{s: s, req: req, res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx)}
	sc.in = s.intake.Begin(ctx, req, sc.res)
	for _, c := range req.Candidates {
		if id, v := sc.in.Admit(c); v == scanutil.Take {
			sc.toDef = append(sc.toDef, &policy{raw: c.Member, qk: keys.QuotaIn(req.Partition, id)})
		}
	}
	if _, err := scanutil.Waves(ctx, host, 0, sc.build); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return sc.res, nil
}

func (sc *scan) build(b *scanutil.Batch) {
	sc.in.QueueRemovals(b)
	def, book, phase, fix := sc.toDef, sc.toBook, sc.toPhase, sc.toFix
	sc.toDef, sc.toBook, sc.toPhase, sc.toFix = nil, nil, nil, nil
	for _, p := range def {
		p := p
		b.Add(func(r []scannerapi.Reply) { sc.definition(p, r[0]) },
			scannerapi.Command{"HMGET", p.qk.Definition(), "quota_policy_id", "requests_per_window_seconds", "active_concurrency_cap"})
	}
	for _, p := range book {
		p := p
		var cmds []scannerapi.Command
		trim := p.windowSec > 0 && !sc.req.DryRun
		if trim {
			upto := strconv.FormatInt(sc.req.NowMs-int64(p.windowSec*1000), 10)
			cmds = append(cmds, scannerapi.Command{"ZREMRANGEBYSCORE", p.qk.Window("requests_per_window"), "-inf", upto})
		}
		if p.cap > 0 {
			cmds = append(cmds, scannerapi.Command{"SMEMBERS", p.qk.AdmittedSet()}, scannerapi.Command{"GET", p.qk.Concurrency()})
		}
		if len(cmds) == 0 {
			sc.done(p)
			continue
		}
		b.Add(func(r []scannerapi.Reply) { sc.bookkeeping(p, trim, r) }, cmds...)
	}
	for _, p := range phase {
		p := p
		var cmds []scannerapi.Command
		for _, m := range p.admitted {
			if id, err := keys.ParseExecutionID(m); err == nil {
				cmds = append(cmds, scannerapi.Command{"HGET", keys.Exec(id).Core(), "lifecycle_phase"})
			} else {
				cmds = append(cmds, nil)
			}
		}
		sc.addPhases(b, p, cmds)
	}
	for _, p := range fix {
		p := p
		var cmds []scannerapi.Command
		for _, m := range p.ended {
			cmds = append(cmds, scannerapi.Command{"SREM", p.qk.AdmittedSet(), m})
		}
		if p.counter != p.live {
			cmds = append(cmds, scannerapi.Command{"SET", p.qk.Concurrency(), strconv.FormatInt(p.live, 10)})
		}
		if sc.req.DryRun {
			if len(cmds) > 0 {
				sc.res.Note("%s: would drop %d ended admission(s) and set concurrency %d -> %d", p.raw, len(p.ended), p.counter, p.live)
				p.worked = true
			}
			sc.done(p)
			continue
		}
		if len(cmds) == 0 {
			sc.done(p)
			continue
		}
		b.Add(func(r []scannerapi.Reply) {
			for _, rr := range r {
				if rr.Failed() {
					sc.fail(p, rr)
					return
				}
			}
			p.worked = true
			if p.counter != p.live {
				sc.log.Info("concurrency counter corrected", "quota", p.raw, "was", p.counter, "running", p.live)
			}
			sc.done(p)
		}, cmds...)
	}
}

// addPhases reads the admitted executions' phases. A member that is not an
// execution id holds no slot: it is dropped.
func (sc *scan) addPhases(b *scanutil.Batch, p *policy, cmds []scannerapi.Command) {
	var reads []scannerapi.Command
	var who []string
	for i, c := range cmds {
		if c == nil {
			p.ended = append(p.ended, p.admitted[i])
			continue
		}
		reads = append(reads, c)
		who = append(who, p.admitted[i])
	}
	if len(reads) == 0 {
		sc.toFix = append(sc.toFix, p)
		return
	}
	b.Add(func(r []scannerapi.Reply) {
		for i, rr := range r {
			if rr.Failed() {
				sc.fail(p, rr)
				return
			}
			phase, _ := rr.Text()
			if phase == "" || phase == "terminal" {
				p.ended = append(p.ended, who[i])
				continue
			}
			p.live++
		}
		sc.toFix = append(sc.toFix, p)
	}, reads...)
}

func (sc *scan) definition(p *policy, r scannerapi.Reply) {
	if r.Failed() {
		sc.fail(p, r)
		return
	}
	f := make([]string, 3)
	for i := range f {
		if i < len(r.Array) {
			f[i], _ = r.Array[i].Text()
		}
	}
	if f[0] == "" && f[1] == "" && f[2] == "" {
		// The definition is gone: the id meters nothing.
		sc.res.Processed++
		sc.in.Retire(keys.QuotaPart(sc.req.Partition).QuotaPolicies(), p.raw)
		sc.log.Info("pruning a quota id whose definition is gone", "quota", p.raw)
		return
	}
	p.windowSec, _ = strconv.ParseFloat(f[1], 64)
	capf, _ := strconv.ParseFloat(f[2], 64)
	p.cap = int64(capf)
	sc.toBook = append(sc.toBook, p)
}

func (sc *scan) bookkeeping(p *policy, trimmed bool, r []scannerapi.Reply) {
	for _, rr := range r {
		if rr.Failed() {
			sc.fail(p, rr)
			return
		}
	}
	i := 0
	if trimmed {
		if r[0].Int > 0 {
			p.worked = true
		}
		i++
	}
	if p.cap <= 0 {
		sc.done(p)
		return
	}
	for _, e := range r[i].Array {
		if m, ok := e.Text(); ok {
			p.admitted = append(p.admitted, m)
		}
	}
	s, _ := r[i+1].Text()
	n, _ := strconv.ParseFloat(s, 64)
	p.counter = int64(n)
	sc.toPhase = append(sc.toPhase, p)
}

func (sc *scan) fail(p *policy, r scannerapi.Reply) {
	p.failed = true
	class, code := scanutil.ClassifyReply(r)
	sc.res.AddError(class, code, 1)
	if sc.s.failures.RecordFailureClass(p.raw, sc.req.Cycle, class) {
		sc.log.Error("persistent failure; skipping the quota for a while", "quota", p.raw, "class", class, "code", code)
	}
}

// done counts a policy that got through its waves.
func (sc *scan) done(p *policy) {
	if p.failed {
		return
	}
	sc.s.failures.RecordSuccess(p.raw)
	if p.worked {
		sc.res.Processed++
	} else {
		sc.res.Skipped++
	}
}
