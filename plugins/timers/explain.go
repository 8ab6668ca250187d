package timers

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Explain implements scannerapi.Explainer: what the next scan does with
// the execution's entry in the timer's index (for pending_wp_expiry, the
// entry of a waitpoint of the execution the host found). It takes the
// scan's decisions in the scan's order, through the functions the scan
// calls, reading through host and changing nothing: the intake's rule
// (form, backoff), the memory of entries the library left in place,
// judgeLocated and judgeRead on the same reads (the P5 re-check and the
// filter included), and the spec's call, which builds the library call or
// says why there is none. What the library function then answers is its
// own re-validation; a dry run can only say it would be called.
func (s *Timer) Explain(ctx context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	var cands []scannerapi.Candidate
	for _, c := range req.Scan.Candidates {
		if c.Source == s.sp.source {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return scannerapi.Explains(scannerapi.VerdictNothing, "no_due_entry", "no due entry in %s", s.sp.key), nil
	}
	// One entry per index: the first decides (an execution is in one
	// lane, and has one entry per timer index).
	return s.explainOne(ctx, host, &req.Scan, cands[0])
}

func (s *Timer) explainOne(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest, c scannerapi.Candidate) (*scannerapi.Explanation, error) {
	due := int64(c.Score)
	with := func(e *scannerapi.Explanation) *scannerapi.Explanation { e.DueAtMs = due; return e }
	id, e := s.intake().Explain(c, req)
	if e != nil {
		return with(e), nil
	}
	if _, stuck := s.stuck.Peek(req.Partition.Index, c.Key+"\x00"+c.Member, c.Score, req.Cycle); stuck {
		return with(scannerapi.Explains(scannerapi.VerdictSkips, "left_in_place",
			"%s left this entry in place when last called (remembered until its score changes)", s.sp.function)), nil
	}
	filter := s.filter.Get()
	sc := &scan{s: s, req: req, pk: keys.FlowPart(req.Partition), filter: filter, res: &scannerapi.ScanResult{}}
	it := &item{member: c.Member, score: c.Score, index: c.Key, lane: c.Lane, eid: id.eid, wpid: id.wpid}
	exec := func(cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		rs, err := host.Exec(ctx, cmds)
		if err == nil && len(rs) != len(cmds) {
			err = fmt.Errorf("%d replies to %d commands", len(rs), len(cmds))
		}
		if err != nil {
			return nil, fmt.Errorf("explain reads: %w", err)
		}
		return rs, nil
	}
	var st judged
	if s.sp.members == waitpointMember {
		rs, err := exec([]scannerapi.Command{
			{"HMGET", sc.pk.Waitpoint(it.wpid), "execution_id", "state"},
			{"ZSCORE", it.index, it.member}})
		if err != nil {
			return nil, err
		}
		st = judgeLocated(it, rs[0], rs[1], req.NowMs, filter)
	} else {
		st = judged{step: stepRead}
	}
	if st.step == stepRead {
		if cmds := s.readCommands(it, filter); len(cmds) > 0 {
			rs, err := exec(cmds)
			if err != nil {
				return nil, err
			}
			nf := len(filter.ReadCommands(it.eid))
			st = s.judgeRead(it, rs[:len(rs)-nf], rs[len(rs)-nf:], req.NowMs, filter)
		} else {
			st = judged{step: stepAct}
		}
	}
	switch st.step {
	case stepFailed:
		class, code := scanutil.ClassifyReply(st.reply)
		return with(scannerapi.Explains(scannerapi.VerdictSkips, code, "a read failed (%s %s); the scan counts it and tries again", class, code)), nil
	case stepFiltered:
		return with(scannerapi.Explains(scannerapi.VerdictSkips, "filtered", "outside this scanner's filter (%s)", filter.String())), nil
	case stepGone:
		return with(scannerapi.Explains(scannerapi.VerdictNothing, "not_due_any_more", "re-armed for later or already handled since the index was read")), nil
	case stepRecord:
		if st.o.kind == outStuck {
			return with(scannerapi.Explains(scannerapi.VerdictSkips, st.o.code, "left in place: %s", st.o.code)), nil
		}
		return with(scannerapi.Explains(scannerapi.VerdictSkips, st.o.code, "cannot act: %s", st.o.code)), nil
	}
	cmd, why := s.sp.call(sc, it)
	switch {
	case cmd == nil && why == "":
		return with(scannerapi.Explains(scannerapi.VerdictSkips, "left_to_another_path", "not this scanner's to act on now: another path owns it (e.g. a reclaim)")), nil
	case why != "":
		e := with(scannerapi.Explains(scannerapi.VerdictSkips, why, "cannot act: %s", why))
		e.Inconsistent = append(e.Inconsistent, fmt.Sprintf("%s entry %s: %s", s.sp.source, c.Member, why))
		return e, nil
	}
	e = with(scannerapi.Explains(scannerapi.VerdictActs, cmd[1], "due at %d ms: the next scan calls %s to %s it", due, cmd[1], s.sp.verb))
	if it.retry != "" {
		e.Detail += " (a retry is left: the attempt fails and the next one is scheduled)"
	}
	return e, nil
}
