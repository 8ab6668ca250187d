package retention

// This file decides an examined execution and purges it: the reads'
// verdict, the deletes in leaves-first order, the final index removals.

import (
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// examine queues the batched read that decides an entry.
func (sc *scan) examine(it *item) {
	sc.queue.Add(func(rs []scannerapi.Reply) { sc.judge(it, rs) }, examineCommands(sc.pk, it, sc.cfg.filter)...)
}

// examineCommands are the reads that decide an entry, the scan's and
// Explain's.
func examineCommands(pk keys.FlowPartKeys, it *item, filter scannerapi.Filter) []scannerapi.Command {
	ek := keys.Exec(it.id)
	cmds := []scannerapi.Command{
		{"ZSCORE", pk.LaneTerminal(it.lane), it.member},
		append(scannerapi.Command{"HMGET", ek.Core()}, coreFields...),
		{"GET", ek.Policy()},
		{"SMEMBERS", ek.DepsAllEdges()},
		{"SMEMBERS", ek.Waitpoints()},
		{"ZRANGE", ek.Signals(), "0", "-1"},
		{"ZRANGE", ek.Attempts(), "0", "-1"},
	}
	return append(cmds, filter.ReadCommands(it.id)...)
}

// readExamined reads examineCommands' replies into what decide takes, or
// says why it cannot (the failure's class and code).
func readExamined(rs []scannerapi.Reply, filter scannerapi.Filter) (examined, scannerapi.ErrorClass, string) {
	for _, r := range rs[:7] {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			return examined{}, class, "read_" + code
		}
	}
	e := examined{kept: filter.Decide(rs[7:])}
	switch rs[0].Kind {
	case scannerapi.KindNil:
	case scannerapi.KindFloat:
		e.inIndex, e.score = true, rs[0].Float
	default:
		s, _ := rs[0].Text()
		f, err := strconv.ParseFloat(s, 64)
		e.inIndex, e.score = err == nil, f
	}
	core, ok := replyStrings(rs[1])
	if !ok || len(core) != len(coreFields) {
		return examined{}, scannerapi.ErrServer, "read_malformed_reply"
	}
	for i := range rs[1].Array {
		if !rs[1].Array[i].IsNil() {
			e.coreExists = true
		}
	}
	e.phase, e.completed, e.attempts, e.waitpoint = core[1], core[2], core[3], core[4]
	e.hasPolicy = !rs[2].IsNil()
	e.policy, _ = rs[2].Text()
	var ok1, ok2, ok3, ok4 bool
	e.edges, ok1 = replyStrings(rs[3])
	e.waitpoints, ok2 = replyStrings(rs[4])
	e.signals, ok3 = replyStrings(rs[5])
	e.attemptIDs, ok4 = replyStrings(rs[6])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return examined{}, scannerapi.ErrServer, "read_malformed_reply"
	}
	return e, "", ""
}

// judge reads an examined entry and acts on the verdict.
func (sc *scan) judge(it *item, rs []scannerapi.Reply) {
	e, class, code := readExamined(rs, sc.cfg.filter)
	if code != "" {
		sc.failed(it, class, code)
		return
	}
	if e.inIndex {
		it.score = e.score // re-scored since it was read (a replay that ended again)
	}
	v := decide(e, sc.req.NowMs, sc.cfg.ret)
	switch v.kind {
	case vLeft:
		sc.s.memo.Forget(sc.req.Partition.Index, it.member)
		sc.s.failures.RecordSuccess(it.member)
	case vKept:
		sc.res.Skipped++
		sc.s.failures.RecordSuccess(it.member)
		sc.remember(it, memo{dueAt: v.dueAt})
	case vFiltered:
		sc.res.Skipped++
		sc.remember(it, memo{recheck: sc.req.Cycle + stuckCycles})
	case vNotTerminal:
		sc.res.Skipped++
		sc.res.Note("left %s in place: in %s but %s, not terminal", it.member, sc.pk.LaneTerminal(it.lane), e.phase)
		sc.remember(it, memo{recheck: sc.req.Cycle + stuckCycles})
	case vClean:
		if sc.req.DryRun {
			sc.res.Processed++
			sc.res.Note("would remove the index entries of %s (its core is gone)", it.member)
			return
		}
		sc.finalize(it)
	case vPurge:
		pk, err := keysOf(it.id, e)
		if err != nil {
			sc.failed(it, scannerapi.ErrInvalid, "implausible_attempt_count")
			return
		}
		if pk.nonCanonical > 0 {
			sc.res.AddError(scannerapi.ErrInvalid, "non_canonical_child_id", int64(pk.nonCanonical))
		}
		it.purge = pk
		if sc.req.DryRun {
			sc.res.Processed++
			sc.res.Note("would purge %s (%d keys)", it.member, len(pk.leaves)+len(pk.last))
			return
		}
		sc.deleteLeaves(it)
	}
}

// deleteLeaves removes every key of a purged execution but the listing
// sets, the core and the policy, in UNLINKs of at most DeleteChunk keys.
func (sc *scan) deleteLeaves(it *item) {
	parts := chunks(it.purge.leaves, DeleteChunk)
	cmds := make([]scannerapi.Command, len(parts))
	for i, p := range parts {
		cmds[i] = append(scannerapi.Command{"UNLINK"}, p...)
	}
	sc.queue.Add(func(rs []scannerapi.Reply) {
		for _, r := range rs {
			if r.Failed() {
				class, code := scanutil.ClassifyReply(r)
				sc.failed(it, class, "delete_"+code)
				return
			}
		}
		sc.finalize(it)
	}, cmds...)
}

// finalize deletes what is left of an execution in one command (the
// listing sets, the core and the policy; nothing for an entry whose core
// is gone), then removes its index entries.
func (sc *scan) finalize(it *item) {
	var cmds []scannerapi.Command
	if len(it.purge.last) > 0 {
		cmds = append(cmds, append(scannerapi.Command{"UNLINK"}, it.purge.last...))
	}
	cmds = append(cmds,
		scannerapi.Command{"ZREM", sc.pk.LaneTerminal(it.lane), it.member},
		scannerapi.Command{"SREM", sc.pk.AllExecutions(), it.member})
	sc.queue.Add(func(rs []scannerapi.Reply) {
		for _, r := range rs {
			if r.Failed() {
				class, code := scanutil.ClassifyReply(r)
				sc.failed(it, class, "delete_"+code)
				return
			}
		}
		sc.res.Processed++
		sc.progress = true
		if it.head || it.score <= float64(sc.cutDef) {
			sc.purgedFromDue++
		}
		sc.s.memo.Forget(sc.req.Partition.Index, it.member)
		sc.s.failures.RecordSuccess(it.member)
	}, cmds...)
}

// failed counts a failure of an entry and feeds the tracker.
func (sc *scan) failed(it *item, class scannerapi.ErrorClass, code string) {
	sc.res.AddError(class, code, 1)
	if sc.s.failures.RecordFailureClass(it.member, sc.req.Cycle, class) {
		sc.log.Error("execution keeps failing; skipping it for a while",
			"execution_id", it.member, "class", class, "code", code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
	}
}
