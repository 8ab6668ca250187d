package cancelreconciler

// This file holds the four stages of a scan (the package doc describes
// them), each one Exec for every flow of the partition.

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// readFlows is stage 1: existence, a sample of pending members and the
// cancel reason of every flow, in one Exec. Writes queued by admit (ZREM
// of unparsable entries) ride along.
func (sc *scan) readFlows(ctx context.Context) ([]*member, error) {
	b, _ := sc.stage()
	var members []*member
	for _, f := range sc.flows {
		f := f
		b.Add(func(r []scannerapi.Reply) { members = append(members, sc.absorbFlow(f, r)...) },
			scannerapi.Command{"EXISTS", f.keys.Core()},
			scannerapi.Command{"SRANDMEMBER", f.keys.PendingCancels(), strconv.Itoa(sc.cfg.members)},
			scannerapi.Command{"HGET", f.keys.Core(), "cancel_reason"})
	}
	if err := sc.exec(ctx, b); err != nil {
		return nil, fmt.Errorf("flow reads: %w", err)
	}
	return members, nil
}

// absorbFlow reads a flow's three replies and returns its pending members.
func (sc *scan) absorbFlow(f *flow, r []scannerapi.Reply) []*member {
	if bad, ok := firstFailure(r); ok {
		class, code := scanutil.ClassifyReply(bad)
		sc.res.AddError(class, "flow_read_"+code, 1)
		f.retry = true
		if sc.s.failures.RecordFailureClass(flowKeyPrefix+f.member, sc.req.Cycle, class) {
			sc.log.Error("flow keeps failing; skipping it for a while", "flow_id", f.member, "class", class, "code", code)
		}
		return nil
	}
	if r[0].Kind != scannerapi.KindInt || r[1].Kind != scannerapi.KindArray && !r[1].IsNil() {
		sc.res.AddError(scannerapi.ErrServer, "flow_read_malformed_reply", 1)
		f.retry = true
		return nil
	}
	sc.s.failures.RecordSuccess(flowKeyPrefix + f.member)
	if r[0].Int == 0 {
		sc.flowGone(f)
		return nil
	}
	f.reason = flowReason(r[2])
	f.sampled = len(r[1].Array)
	if f.sampled == 0 {
		sc.flowDrained(f)
		return nil
	}
	var members []*member
	for _, e := range r[1].Array {
		if m, ok := e.Text(); ok {
			members = append(members, &member{f: f, raw: m})
		}
	}
	return members
}

// flowGone handles a backlog entry whose flow core no longer exists: its
// owed cancels go with it.
func (sc *scan) flowGone(f *flow) {
	if sc.req.DryRun {
		sc.res.Note("would drop vanished flow %s from the backlog", f.member)
		sc.res.Processed++
		return
	}
	sc.write(scannerapi.Command{"DEL", f.keys.PendingCancels()}, nil)
	sc.write(scannerapi.Command{"ZREM", sc.backlog, f.member}, func(r scannerapi.Reply) {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.res.AddError(class, "backlog_remove_"+code, 1)
			return
		}
		f.progress, f.removed = true, true
		sc.res.Processed++
	})
}

// flowDrained removes a flow with nothing pending from the backlog (the
// last acknowledgement normally does that; this covers a crash between the
// SREM and the ZREM, or a set emptied by hand).
func (sc *scan) flowDrained(f *flow) {
	if sc.req.DryRun {
		sc.res.Note("would drop drained flow %s from the backlog", f.member)
		return
	}
	sc.write(scannerapi.Command{"ZREM", sc.backlog, f.member}, func(r scannerapi.Reply) {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.res.AddError(class, "backlog_remove_"+code, 1)
			return
		}
		f.progress, f.removed = true, true
	})
}

// readMembers is stage 2: the core (and filter reads) of every pending
// member of every flow, in one Exec, with stage 1's writes and the acks of
// garbage members riding along. It returns the members to cancel.
func (sc *scan) readMembers(ctx context.Context, members []*member) []*member {
	var toRead []*member
	for _, m := range members {
		id, v := sc.memberIn.Admit(scannerapi.Candidate{Key: m.f.keys.PendingCancels(), Member: m.raw})
		if v == scanutil.Remove {
			mm := m
			sc.write(sc.ackCommand(m), func(r scannerapi.Reply) {
				if o := classifyAck(r); o != nil {
					sc.res.AddError(o.Class, "ack_"+o.Code, 1)
					return
				}
				mm.f.progress = true
			})
		}
		if v != scanutil.Take {
			continue
		}
		m.id = id
		toRead = append(toRead, m)
	}
	b, writes := sc.stage()
	var toCancel []*member
	for _, m := range toRead {
		m := m
		cmds := append([]scannerapi.Command{append(scannerapi.Command{"HMGET", keys.Exec(m.id).Core()}, scanutil.CancelCoreFields()...)},
			sc.cfg.filter.ReadCommands(m.id)...)
		b.Add(func(r []scannerapi.Reply) {
			if sc.absorbCore(m, r) {
				toCancel = append(toCancel, m)
			}
		}, cmds...)
	}
	if err := sc.exec(ctx, b); err != nil {
		sc.stageFailed(err, writes, toRead)
		return nil
	}
	return toCancel
}

// absorbCore reads a member's core (and filter) replies; true when the
// member goes on to the cancel stage.
func (sc *scan) absorbCore(m *member, r []scannerapi.Reply) bool {
	if r[0].Failed() {
		class, code := scanutil.ClassifyReply(r[0])
		sc.memberFailed(m, class, "core_read_"+code)
		return false
	}
	m.core = scanutil.ParseCancelCore(r[0])
	if !m.core.BadReply && !m.core.Exists {
		// Gone (e.g. purged by retention): nothing to cancel, whoever's it
		// was, and nothing the filter could read.
		m.gone = true
		m.out = outcome{Kind: outNotFound, Code: codeNotFound}
		return true
	}
	if !sc.cfg.filter.Decide(r[1:]) {
		sc.res.Skipped++
		return false
	}
	if _, err := scanutil.CancelKeys(m.id, m.core); err != nil {
		sc.memberFailed(m, scannerapi.ErrInvalid, err.Error())
		return false
	}
	return true
}

// cancel is stage 3: ff_cancel_execution for every member, in one Exec.
// It returns the members that are done.
func (sc *scan) cancel(ctx context.Context, members []*member) []*member {
	var done, called []*member
	var b scanutil.Batch
	for _, m := range members {
		if m.gone {
			done = append(done, m)
			continue
		}
		if sc.req.DryRun {
			m.out = scanutil.PredictCancel(m.core)
			done = append(done, m)
			continue
		}
		m := m
		ks, _ := scanutil.CancelKeys(m.id, m.core)
		called = append(called, m)
		b.Add(func(r []scannerapi.Reply) {
			m.out = scanutil.ClassifyCancel(r[0])
			if m.out.Kind.Done() {
				done = append(done, m)
				return
			}
			sc.memberFailed(m, m.out.Class, m.out.Code)
		}, scanutil.CancelCall(m.id, ks, m.f.reason, Source))
	}
	if err := sc.exec(ctx, &b); err != nil {
		sc.stageFailed(err, 0, called)
	}
	return done
}

// ack is stage 4: ff_ack_cancel_member for every member that is done, in
// one Exec. A dry run only reports.
func (sc *scan) ack(ctx context.Context, done []*member) {
	if sc.req.DryRun {
		for _, m := range done {
			sc.res.Processed++
			sc.res.Note("%s of flow %s: %s", m.raw, m.f.member, m.out.Code)
		}
		return
	}
	var b scanutil.Batch
	for _, m := range done {
		m := m
		b.Add(func(r []scannerapi.Reply) {
			if o := classifyAck(r[0]); o != nil {
				sc.memberFailed(m, o.Class, "ack_"+o.Code)
				return
			}
			sc.res.Processed++
			m.f.progress = true
			sc.s.failures.RecordSuccess(m.raw)
		}, sc.ackCommand(m))
	}
	if err := sc.exec(ctx, &b); err != nil {
		sc.stageFailed(err, 0, done)
	}
}

func (sc *scan) ackCommand(m *member) scannerapi.Command {
	return scannerapi.FCall(FunctionAck, []string{m.f.keys.PendingCancels(), sc.backlog}, m.raw, m.f.member)
}
