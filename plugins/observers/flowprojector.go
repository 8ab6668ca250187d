// Package observers holds the two observing scanners of a flow partition,
// one binary:
//
//   - flow_projector (scanners.md §10.1) writes each flow's summary hash
//     (member counts per public state and a derived flow state) for
//     dashboards, and retires finished flows from flow_index;
//   - index_reconciler (§8.1) checks every execution against the index
//     its state says it belongs in, and counts (and names, in notes) the
//     ones that are missing. It repairs nothing.
//
// Both read a partition set one SSCAN step per cycle (flow_index,
// all_executions), so a partition costs a bounded number of reads per
// cycle however many flows or executions it holds; a full pass takes
// size/batch cycles.
package observers

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Version of both scanners.
const Version = "1.0.0"

// FlowProjectorName is flow_projector's name.
const FlowProjectorName = "flow_projector"

// MaxReadMembers is the largest flow whose members are all read; a larger
// one is projected from a sample of SampleMembers.
const (
	MaxReadMembers = 1000
	SampleMembers  = 50
)

// FlowProjector is flow_projector. Safe for concurrent use by partitions.
type FlowProjector struct {
	failures *scannerapi.FailureTracker
	intake   scanutil.Intake[keys.FlowID]
}

// NewFlowProjector returns flow_projector. flow_index entries that are not
// flow ids are removed; a non-canonical spelling is left.
func NewFlowProjector() *FlowProjector {
	f := scannerapi.NewFailureTracker()
	return &FlowProjector{failures: f,
		intake: scanutil.Intake[keys.FlowID]{Parse: scanutil.FlowIDs, Remove: []keys.IDForm{keys.IDInvalid}, RemoveWith: "SREM", Failures: f}}
}

// Info implements scannerapi.Scanner.
func (s *FlowProjector) Info() scannerapi.Info {
	return scannerapi.Info{
		Name: FlowProjectorName, Version: Version, APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: 15 * time.Second, DefaultBatch: 100,
		Sources: []scannerapi.CandidateSource{{Name: "flow_index", Kind: scannerapi.SourceSetScan,
			Key: "ff:idx:{p}:flow_index", Backlog: scannerapi.BacklogSize}},
		// HGET: flow and member cores. SCARD, SMEMBERS, SRANDMEMBER: the
		// members. HSET: the summary. SREM: retired and vanished flows.
		Commands: []string{"HGET", "SCARD", "SMEMBERS", "SRANDMEMBER", "HSET", "SREM"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "HSET", Patterns: []string{"ff:flow:{fp:*}:*:summary"}},
			{Command: "SREM", Patterns: []string{"ff:idx:{fp:*}:flow_index"}},
		},
	}
}

// Configure implements scannerapi.Scanner (no options).
func (s *FlowProjector) Configure(ctx context.Context, options map[string]string) error {
	_, err := scanutil.ParseOptions(s.Info().Options, options)
	return err
}

// projection is one flow on its way through the waves.
type projection struct {
	raw     string
	fk      keys.FlowKeys
	total   int64
	members []string
	counts  map[string]int64
	sampled int64
	purged  int64 // members whose core is gone (retention purges ended ones)
	failed  bool
}

type projectScan struct {
	s   *FlowProjector
	req *scannerapi.ScanRequest
	res *scannerapi.ScanResult
	log hclog.Logger

	in                                   *scanutil.Intake[keys.FlowID]
	toCore, toMembers, toStates, toWrite []*projection
}

// ScanPartition implements scannerapi.Scanner.
func (s *FlowProjector) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	sc := &projectScan{s: s, req: req, res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx)}
	sc.in = s.intake.Begin(ctx, req, sc.res)
	for _, c := range req.Candidates {
		if fid, v := sc.in.Admit(c); v == scanutil.Take {
			sc.toCore = append(sc.toCore, &projection{raw: c.Member, fk: keys.FlowIn(req.Partition, fid), counts: map[string]int64{}})
		}
	}
	if _, err := scanutil.Waves(ctx, host, 0, sc.build); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return sc.res, nil
}

func (sc *projectScan) build(b *scanutil.Batch) {
	sc.in.QueueRemovals(b)
	core, members, states, write := sc.toCore, sc.toMembers, sc.toStates, sc.toWrite
	sc.toCore, sc.toMembers, sc.toStates, sc.toWrite = nil, nil, nil, nil
	for _, p := range core {
		p := p
		b.Add(func(r []scannerapi.Reply) { sc.core(p, r[0], r[1]) },
			scannerapi.Command{"HGET", p.fk.Core(), "flow_id"}, scannerapi.Command{"SCARD", p.fk.Members()})
	}
	for _, p := range members {
		p := p
		b.Add(func(r []scannerapi.Reply) { sc.memberList(p, r[0]) }, membersRead(p.fk, p.total))
	}
	for _, p := range states {
		p := p
		var cmds []scannerapi.Command
		for _, m := range p.members {
			cmd := stateRead(m)
			if cmd == nil {
				sc.res.AddError(scannerapi.ErrInvalid, "invalid_flow_member", 1)
				continue
			}
			cmds = append(cmds, cmd)
		}
		if len(cmds) == 0 {
			sc.toWrite = append(sc.toWrite, p)
			continue
		}
		b.Add(func(r []scannerapi.Reply) { sc.memberStates(p, r) }, cmds...)
	}
	for _, p := range write {
		sc.write(b, p)
	}
}

func (sc *projectScan) fail(p *projection, r scannerapi.Reply) {
	p.failed = true
	class, code := scanutil.ClassifyReply(r)
	sc.res.AddError(class, code, 1)
	sc.s.failures.RecordFailureClass(p.raw, sc.req.Cycle, class)
}

func (sc *projectScan) core(p *projection, flowID, card scannerapi.Reply) {
	for _, r := range []scannerapi.Reply{flowID, card} {
		if r.Failed() {
			sc.fail(p, r)
			return
		}
	}
	if flowID.IsNil() {
		// The flow is gone: retire its index entry.
		sc.res.Processed++
		sc.in.Retire(keys.FlowPart(sc.req.Partition).FlowIndex(), p.raw)
		return
	}
	p.total = card.Int
	if p.total == 0 {
		sc.res.Skipped++
		return
	}
	sc.toMembers = append(sc.toMembers, p)
}

func (sc *projectScan) memberList(p *projection, r scannerapi.Reply) {
	if r.Failed() {
		sc.fail(p, r)
		return
	}
	for _, e := range r.Array {
		if m, ok := e.Text(); ok {
			p.members = append(p.members, m)
		}
	}
	sc.toStates = append(sc.toStates, p)
}

func (sc *projectScan) memberStates(p *projection, rs []scannerapi.Reply) {
	for _, r := range rs {
		if r.Failed() {
			sc.fail(p, r)
			return
		}
		p.sampled++
		if r.IsNil() {
			p.purged++
			continue
		}
		st, _ := r.Text()
		p.counts[st]++
	}
	sc.toWrite = append(sc.toWrite, p)
}

func (sc *projectScan) write(b *scanutil.Batch, p *projection) {
	state := flowState(p.counts, p.sampled, p.purged)
	if sc.req.DryRun {
		sc.res.Processed++
		sc.res.Note("flow %s: %s (%d of %d members read)", p.raw, state, p.sampled, p.total)
		return
	}
	cmds := []scannerapi.Command{summaryCommand(p.fk, p.total, p.sampled, p.counts, state, sc.req.NowMs)}
	if retired(state, p.sampled, p.total) {
		cmds = append(cmds, scannerapi.Command{"SREM", keys.FlowPart(sc.req.Partition).FlowIndex(), p.raw})
	}
	b.Add(func(r []scannerapi.Reply) {
		for _, rr := range r {
			if rr.Failed() {
				sc.fail(p, rr)
				return
			}
		}
		sc.s.failures.RecordSuccess(p.raw)
		sc.res.Processed++
	}, cmds...)
}
