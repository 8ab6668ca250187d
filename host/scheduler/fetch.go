package scheduler

// This file is a cycle's first step: the host-side read of every
// partition's candidates and backlog counts, pipelined, and the source
// cursors committed once a partition is done.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/keyless"
	"github.com/ffscan/ffscan/host/spread"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func (r *Runner) partitions(info scannerapi.Info, only []uint16) ([]keys.Partition, error) {
	all := r.cfg.Partitions.Partitions(info.Family)
	if only == nil {
		return all, nil
	}
	out := make([]keys.Partition, 0, len(only))
	for _, i := range only {
		if int(i) >= len(all) {
			return nil, fmt.Errorf("partition %d out of range: family %s has %d partitions", i, info.Family, len(all))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func (r *Runner) serverTime(ctx context.Context) (int64, error) {
	t, err := keyless.Do(ctx, r.client, func(b valkey.Builder) valkey.Completed { return b.Time().Build() }).AsIntSlice()
	if err != nil {
		return 0, err
	}
	if len(t) != 2 {
		return 0, fmt.Errorf("TIME returned %d elements", len(t))
	}
	return t[0]*1000 + t[1]/1000, nil
}

// sweep is one cycle's fixed inputs (the scanner as the cycle found it,
// its lanes and batch, whether it is a dry run) and its running summary,
// shared by the cycle's steps: fetch, dispatch and backlog.
type sweep struct {
	r *Runner
	// canary, when set, gets every partition first (canary.go).
	canary  Canary
	scanner scannerapi.Scanner
	info    scannerapi.Info
	lanes   []string
	batch   int
	dryRun  bool
	sum     *Summary
	// hasLaneSource: some source is per lane; laneSet is lanes as a set,
	// made when the census is used.
	hasLaneSource bool
	laneSet       map[string]bool
	// rank: due-ordered sources are read by rank, so that the read shows
	// the first entry not due yet, and wake-ups are scheduled (wake.go).
	// dueOnly: only the time-scored sources are read (a wake-up).
	rank, dueOnly bool
	// The latest clock read: the store's time, the host's time once it
	// was read, and the store epoch before it was read; clocked: the
	// sweep has read it, clockErr: why a Postgres sweep has not (its
	// first failed read, which was to bring it: now).
	nowMs    int64
	nowAt    time.Time
	epoch    uint64
	clocked  bool
	clockErr error
}

// fetch reads candidates and backlog counts of the given partitions in at
// most two pipelined rounds, so that an empty partition costs one command
// per source (most partitions of an idle deployment are empty):
//
//   - a due backlog on a due-ordered source is the number of members the
//     candidate read returned when it returned fewer than a batch (same
//     bounds); only a full batch needs its ZCOUNT, in the second round;
//   - a size backlog is read first (ZCARD/SCARD), and the candidates only
//     where it is not zero, in the second round;
//   - any other backlog is read beside the candidates.
func (sw *sweep) fetch(ctx context.Context, parts []keys.Partition, nowMs int64) []*partState {
	r := sw.r
	states := make([]*partState, len(parts))
	var first []fetchOp
	r.cursors.mu.Lock()
	for i, p := range parts {
		st := &partState{p: p, next: map[string]uint64{}, sampled: true}
		states[i] = st
		for _, sk := range sw.expand(st) {
			if sw.dueOnly && sk.src.Kind != scannerapi.SourceZSetDue {
				continue
			}
			st.srcKeys++
			if sk.src.Backlog == scannerapi.BacklogPlugin {
				st.pluginKeys++
			}
			op := fetchOp{st: st, sk: sk, cur: r.cursors.at[sk.key]}
			switch plan(sk.src) {
			case sizeFirst:
				op.kind = opSize
				first = append(first, op)
			case countFromRead:
				op.kind, op.countIfFull = opRead, true
				first = append(first, op)
			case readAndCount:
				op.kind = opRead
				first = append(first, op, fetchOp{st: st, sk: sk, kind: opCount})
			default:
				op.kind = opRead
				first = append(first, op)
			}
		}
	}
	r.cursors.mu.Unlock()
	first = sw.skipEmpty(ctx, first)
	second := sw.runOps(ctx, first, nowMs)
	sw.runOps(ctx, second, nowMs)
	return states
}

// Census tells which lane index keys exist (host/census).
type Census interface {
	// Keys returns the existing lane keys of partition tag, and whether
	// the census knows them now.
	Keys(tag string) ([]string, bool)
}

// expand returns the keys of st's partition to read. With a census that
// knows the partition, a lane-scoped source reads only the lanes whose key
// exists (the others are empty: a key with no members does not exist),
// so an idle host's cost does not grow with the lanes; without one, every
// lane's key.
func (sw *sweep) expand(st *partState) []sourceKey {
	cen := sw.r.cfg.Census
	if cen == nil || !sw.hasLaneSource {
		return expand(sw.info.Sources, st.p, sw.lanes)
	}
	present, ok := cen.Keys(st.p.Tag())
	if !ok {
		return expand(sw.info.Sources, st.p, sw.lanes)
	}
	st.censused = true
	if sw.laneSet == nil {
		sw.laneSet = make(map[string]bool, len(sw.lanes))
		for _, l := range sw.lanes {
			sw.laneSet[l] = true
		}
	}
	var out []sourceKey
	for _, s := range sw.info.Sources {
		k := strings.ReplaceAll(s.Key, "{p}", st.p.Tag())
		pre, suf, isLane := strings.Cut(k, "{lane}")
		if !isLane {
			out = append(out, sourceKey{src: s, key: k})
			continue
		}
		found := 0
		for _, key := range present {
			if len(key) <= len(pre)+len(suf) || !strings.HasPrefix(key, pre) || !strings.HasSuffix(key, suf) {
				continue
			}
			lane := key[len(pre) : len(key)-len(suf)]
			if !sw.laneSet[lane] {
				continue
			}
			found++
			out = append(out, sourceKey{src: s, key: key, lane: lane})
		}
		if s.Backlog == scannerapi.BacklogPlugin {
			// The lanes left out are absent keys, as far as the
			// plugin's backlog goes.
			st.pluginKeys += len(sw.lanes) - found
			st.pluginAbsent += len(sw.lanes) - found
		}
	}
	return out
}

// existsChunk bounds the keys of one EXISTS of the empty-source check.
const existsChunk = 256

// skipEmpty drops the first-round ops of keys that do not exist, decided
// for many keys at once: an idle deployment's sources are mostly absent
// keys (a set or sorted set ceases to exist when its last member goes),
// and one EXISTS over a chunk of them that answers 0 proves every key of
// the chunk empty, for the price of one command instead of one per key.
// A chunk with any existing key is read key by key as before (one command
// more per chunk). Multi-key EXISTS needs one slot, which keys of
// different partitions never share on a cluster: there the check is not
// made (nor where a server refused it).
func (sw *sweep) skipEmpty(ctx context.Context, ops []fetchOp) []fetchOp {
	r := sw.r
	if r.client.Mode() == valkey.ClientModeCluster || r.noExistsCheck.Load() || len(ops) < 2 {
		return ops
	}
	// One group per source (and lane), so that a source with entries in
	// some partition does not make the empty sources be read key by key.
	groups := map[string][]string{}
	var order []string
	seen := map[string]bool{}
	for _, op := range ops {
		if seen[op.sk.key] {
			continue
		}
		seen[op.sk.key] = true
		g := op.sk.src.Name + "\x00" + op.sk.lane
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], op.sk.key)
	}
	var cmds valkey.Commands
	var chunks [][]string
	for _, g := range order {
		ks := groups[g]
		for i := 0; i < len(ks); i += existsChunk {
			chunk := ks[i:min(i+existsChunk, len(ks))]
			chunks = append(chunks, chunk)
			cmds = append(cmds, r.client.B().Exists().Key(chunk...).Build())
		}
	}
	absent := map[string]bool{}
	for i, res := range r.client.DoMulti(ctx, cmds...) {
		n, err := res.AsInt64()
		if err != nil {
			if isCrossSlot(err) {
				r.noExistsCheck.Store(true)
				r.log.Debug("multi-key EXISTS is refused: reading every source key")
			}
			continue // read this chunk key by key
		}
		if n == 0 {
			for _, k := range chunks[i] {
				absent[k] = true
			}
		}
	}
	kept := ops[:0]
	for _, op := range ops {
		if !absent[op.sk.key] {
			kept = append(kept, op)
			continue
		}
		// An absent key: no candidates, a backlog of 0 (counted once per
		// key), and a rank window or scan cursor starts over.
		if op.kind != opCount && op.sk.src.Kind != scannerapi.SourceZSetDue {
			op.st.next[op.sk.key] = 0
		}
		if op.kind != opCount {
			op.st.emptyKeys++
		}
		if op.kind == opRead && op.sk.src.Backlog == scannerapi.BacklogPlugin {
			op.st.pluginAbsent++
		}
	}
	return kept
}

// isCrossSlot recognises the refusal of a multi-key command whose keys
// hash to different slots (the server's CROSSSLOT, or the client's own
// check).
func isCrossSlot(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "CROSSSLOT") || strings.Contains(msg, "slot")
}

// How a source's candidates and backlog are read (see fetch).
const (
	readOnly      = iota // no host-side backlog
	countFromRead        // due backlog: the read's length, ZCOUNT only after a full batch
	sizeFirst            // size backlog: ZCARD/SCARD, the read only when not empty
	readAndCount         // a backlog the read cannot stand in for: both at once
)

func plan(s scannerapi.CandidateSource) int {
	switch s.Backlog {
	case scannerapi.BacklogDue:
		if s.Kind == scannerapi.SourceZSetDue {
			return countFromRead
		}
		return readAndCount
	case scannerapi.BacklogSize:
		return sizeFirst
	}
	return readOnly
}

// fetchOp is one command of the fetch: a candidate read, a size read or a
// due count of one source key of one partition.
type fetchOp struct {
	st   *partState
	sk   sourceKey
	kind int
	cur  uint64 // the source's cursor (reads)
	// countIfFull: a read whose length is the due backlog unless it is a
	// full batch, which then needs a count.
	countIfFull bool
}

const (
	opRead = iota
	opSize
	opCount
	opNext // the first entry not due yet, after a full window read by rank
)

// runOps runs ops in pipelined chunks, applies their replies to the
// partitions' states, and returns the follow-up ops the replies call for.
func (sw *sweep) runOps(ctx context.Context, ops []fetchOp, nowMs int64) []fetchOp {
	if len(ops) == 0 {
		return nil
	}
	r := sw.r
	cmds := make(valkey.Commands, len(ops))
	part := make([]int, len(ops))
	for i, op := range ops {
		part[i] = int(op.st.p.Index)
		switch op.kind {
		case opRead:
			cmds[i] = readCmd(r.client, op.sk, nowMs, sw.batch, op.cur, sw.rank)
		case opNext:
			cmds[i] = nextDueCmd(r.client, op.sk, nowMs)
		case opSize, opCount:
			cmds[i], _ = backlogCmd(r.client, op.sk, nowMs)
		}
	}
	results := spread.DoMulti(ctx, r.clk, r.client, cmds, part)
	var next []fetchOp
	for i, res := range results {
		switch op := ops[i]; op.kind {
		case opCount:
			sw.applyCount(op, res)
		case opSize:
			next = sw.applySize(op, res, next)
		case opRead:
			next = sw.applyRead(op, res, nowMs, next)
		case opNext:
			sw.applyNext(op, res)
		}
	}
	return next
}

// failed accounts for a failed read of a source: a source of the wrong
// type is the operator's to fix; any other failure leaves the partition's
// backlog unmeasured.
func (sw *sweep) failed(op fetchOp, err error, what string) {
	if sw.r.wrongTypeSource(sw.sum, op.sk.key, err) {
		return
	}
	op.st.sampled = false
	sw.r.noteErr(sw.sum, classify(err), what, 1)
}

// applyCount adds a full window's due count to the backlog.
func (sw *sweep) applyCount(op fetchOp, res valkey.ValkeyResult) {
	n, err := res.AsInt64()
	if err != nil {
		sw.failed(op, err, "backlog")
		return
	}
	op.st.backlog += n
}

// applySize adds a source's due size to the backlog and asks for its read
// when it holds anything.
func (sw *sweep) applySize(op fetchOp, res valkey.ValkeyResult, next []fetchOp) []fetchOp {
	st := op.st
	n, err := res.AsInt64()
	if err != nil {
		// Without the size the candidates were not read either.
		st.fetchError = true
		sw.failed(op, err, "fetch")
		sw.r.log.Debug("candidate source size read failed", "partition", st.p.Tag(), "key", op.sk.key, "error", err)
		return next
	}
	st.backlog += n
	if n > 0 {
		return append(next, fetchOp{st: st, sk: op.sk, kind: opRead, cur: op.cur})
	}
	st.emptyKeys++
	if op.sk.src.Kind != scannerapi.SourceZSetDue {
		// Empty: a rank window or scan cursor starts over.
		st.next[op.sk.key] = 0
	}
	return next
}

// applyRead takes a read's candidates and asks for what a full read
// leaves unknown: the due count, and the first entry not due yet.
func (sw *sweep) applyRead(op fetchOp, res valkey.ValkeyResult, nowMs int64, next []fetchOp) []fetchOp {
	st := op.st
	n, err := sw.parseRead(res, op.sk, op.cur, st, nowMs)
	if err != nil {
		st.fetchError = true
		sw.failed(op, err, "fetch")
		sw.r.log.Debug("candidate fetch failed", "partition", st.p.Tag(), "key", op.sk.key, "error", err)
		return next
	}
	full := n >= sw.batch
	if sw.rank {
		// Read by rank, the batch plus one: only a read that was due to
		// its last entry leaves more to count, and leaves the next due
		// entry unseen.
		full = n > sw.batch
		if full && op.sk.src.Kind == scannerapi.SourceZSetDue {
			next = append(next, fetchOp{st: st, sk: op.sk, kind: opNext})
		}
	}
	if op.countIfFull {
		if !full {
			st.backlog += int64(n)
		} else {
			next = append(next, fetchOp{st: st, sk: op.sk, kind: opCount})
		}
	}
	return next
}

// applyNext schedules the partition's wake-up at the first entry not due
// yet.
func (sw *sweep) applyNext(op fetchOp, res valkey.ValkeyResult) {
	zs, err := res.AsZScores()
	if err != nil {
		// Only a hint is lost: the partition is not scheduled.
		op.st.fetchError = true
		sw.r.noteErr(sw.sum, classify(err), "fetch", 1)
		return
	}
	if len(zs) > 0 {
		op.st.noteWake(zs[0].Score, op.sk.src.ScoreOffset)
	}
}

// parseRead adds a read's candidates to st and returns how many the read
// returned.
func (sw *sweep) parseRead(res valkey.ValkeyResult, sk sourceKey, cur uint64, st *partState, nowMs int64) (int, error) {
	batch := sw.batch
	add := func(member string, score float64) {
		st.cands = append(st.cands, scannerapi.Candidate{Source: sk.src.Name, Key: sk.key, Lane: sk.lane, Member: member, Score: score})
	}
	switch sk.src.Kind {
	case scannerapi.SourceSetScan:
		e, err := res.AsScanEntry()
		if err != nil {
			return 0, err
		}
		for _, m := range e.Elements {
			add(m, 0)
		}
		st.next[sk.key] = e.Cursor // 0 once the scan wrapped
		if cur == 0 && e.Cursor == 0 && len(e.Elements) == 0 {
			st.emptyKeys++ // a whole scan found nothing
		}
		return len(e.Elements), nil
	default:
		zs, err := res.AsZScores()
		if err != nil {
			return 0, err
		}
		if sk.src.Kind == scannerapi.SourceZSetDue && sw.rank {
			// Read by rank: the due entries, then the first that is not
			// due yet (when the read reached one), which is when the
			// partition has work next. It returns how many were due,
			// which is more than the batch when the read was due to its
			// end.
			bound := float64(maxScore(sk.src, nowMs))
			due := 0
			for due < len(zs) && zs[due].Score <= bound {
				due++
			}
			if due < len(zs) {
				st.noteWake(zs[due].Score, sk.src.ScoreOffset)
			}
			if len(zs) == 0 {
				st.emptyKeys++ // from rank 0: the key has no members
			}
			zs = zs[:min(due, batch)]
			for _, z := range zs {
				add(z.Member, z.Score)
			}
			sw.noteDue(st, sk, zs)
			return due, nil
		}
		for _, z := range zs {
			add(z.Member, z.Score)
		}
		if sk.src.Kind == scannerapi.SourceZSetRotate {
			if cur == 0 && len(zs) == 0 {
				st.emptyKeys++ // from rank 0: the key has no members
			}
			// A short window means the end was reached: wrap.
			if len(zs) < batch {
				st.next[sk.key] = 0
			} else {
				st.next[sk.key] = cur + uint64(batch)
			}
		} else {
			sw.noteDue(st, sk, zs)
		}
		return len(zs), nil
	}
}

// noteDue keeps the oldest due instant of a due read's entries, for the
// lag, which is measured against the source's own due bound.
func (sw *sweep) noteDue(st *partState, sk sourceKey, zs []valkey.ZScore) {
	if len(zs) == 0 {
		return
	}
	due := zs[0].Score - float64(sk.src.ScoreOffset.Milliseconds())
	if !st.hasDue || due < st.oldestDue {
		st.oldestDue, st.hasDue = due, true
	}
}

// commitCursors advances a partition's cursors once its candidates were
// handled (or there were none); after a failed call they stay, so the
// same window is retried next cycle instead of being skipped.
func (r *Runner) commitCursors(st *partState) {
	if len(st.next) == 0 {
		return
	}
	r.cursors.commit(st.next)
}

// cursors are where each concrete source key's read resumes: a rank
// offset or an SSCAN cursor. The fetch reads them under mu, a partition's
// done call commits its own.
type cursors struct {
	mu sync.Mutex
	at map[string]uint64
}

func (c *cursors) commit(next map[string]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[string]uint64{}
	}
	for k, v := range next {
		c.at[k] = v
	}
}

// get is key's cursor.
func (c *cursors) get(key string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[key]
}

// wrongTypeSource handles a source key that holds another type than the
// source reads (WRONGTYPE): data no retry will fix. It is counted (class
// invalid, code wrong_type_source), shown in status and logged once per
// key, and the key counts as empty, so that one corrupt key does not
// freeze the scanner's backlog and lag gauges; it reports false for any
// other error.
func (r *Runner) wrongTypeSource(sum *Summary, key string, err error) bool {
	verr, ok := valkey.IsValkeyErr(err)
	if !ok || !strings.HasPrefix(verr.Error(), "WRONGTYPE") {
		return false
	}
	sum.addErr(scannerapi.ErrInvalid, "wrong_type_source", 1)
	r.setLastError(fmt.Sprintf("source key %s holds the wrong type; it is skipped (and counts as empty) until it is fixed or deleted", key))
	if r.warned.first(key) {
		r.log.Warn("a source key holds the wrong type; skipping it every cycle (counted as class invalid, code wrong_type_source) until it is fixed or deleted", "key", key, "error", verr.Error())
	}
	return true
}

// onceKeys are keys already told of, each once.
type onceKeys struct {
	mu   sync.Mutex
	seen map[string]bool
}

// first reports whether key is told of for the first time, and notes it.
func (o *onceKeys) first(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[key] {
		return false
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[key] = true
	return true
}
