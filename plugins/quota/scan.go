package quota

import (
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

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

func (sc *scan) build(b *scanutil.Batch) {
	sc.in.QueueRemovals(b)
	def, book, phase, fix := sc.toDef, sc.toBook, sc.toPhase, sc.toFix
	sc.toDef, sc.toBook, sc.toPhase, sc.toFix = nil, nil, nil, nil
	for _, p := range def {
		p := p
		b.Add(func(r []scannerapi.Reply) { sc.definition(p, r[0]) },
			append(scannerapi.Command{"HMGET", p.qk.Definition()}, definitionFields...))
	}
	for _, p := range book {
		p := p
		var cmds []scannerapi.Command
		trim := p.windowSec > 0 && !sc.req.DryRun
		if trim {
			upto := strconv.FormatInt(trimUpTo(sc.req.NowMs, p.windowSec), 10)
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
			cmds = append(cmds, phaseRead(m))
		}
		sc.addPhases(b, p, cmds)
	}
	for _, p := range fix {
		p := p
		cmds := fixCommands(p.qk, p.ended, p.counter, p.live)
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
			if phase, _ := rr.Text(); !running(phase) {
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
	windowSec, capacity, gone := definitionOf(r)
	if gone {
		// The definition is gone: the id meters nothing.
		sc.res.Processed++
		sc.in.Retire(keys.QuotaPart(sc.req.Partition).QuotaPolicies(), p.raw)
		sc.log.Info("pruning a quota id whose definition is gone", "quota", p.raw)
		return
	}
	p.windowSec, p.cap = windowSec, capacity
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
	p.counter = counterOf(r[i+1])
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
