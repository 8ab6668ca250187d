package scheduler

// This file is a cycle's first step: the host-side read of every
// partition's candidates and backlog counts, pipelined, and the source
// cursors committed once a partition is done.

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"

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
	t, err := r.client.Do(ctx, r.client.B().Time().Build()).AsIntSlice()
	if err != nil {
		return 0, err
	}
	if len(t) != 2 {
		return 0, fmt.Errorf("TIME returned %d elements", len(t))
	}
	return t[0]*1000 + t[1]/1000, nil
}

// pipelineChunk bounds the commands of one DoMulti so a large partition
// count does not build one huge pipeline.
const pipelineChunk = 1024

// sweep is one cycle's fixed inputs (the scanner as the cycle found it,
// its lanes and batch, whether it is a dry run) and its running summary,
// shared by the cycle's steps: fetch, dispatch and backlog.
type sweep struct {
	r       *Runner
	scanner scannerapi.Scanner
	info    scannerapi.Info
	lanes   []string
	batch   int
	dryRun  bool
	sum     *Summary
}

// fetch reads candidates and backlog counts of the given partitions.
func (sw *sweep) fetch(ctx context.Context, parts []keys.Partition, nowMs int64) []*partState {
	r, info, lanes, sum := sw.r, sw.info, sw.lanes, sw.sum
	type slot struct {
		st   *partState
		sk   sourceKey
		kind int // 0 read, 1 backlog
		cur  uint64
	}
	states := make([]*partState, len(parts))
	var cmds valkey.Commands
	var slots []slot
	r.curMu.Lock()
	for i, p := range parts {
		st := &partState{p: p, next: map[string]uint64{}, sampled: true}
		states[i] = st
		for _, sk := range expand(info.Sources, p, lanes) {
			cur := r.cursors[sk.key]
			cmds = append(cmds, readCmd(r.client, sk, nowMs, sw.batch, cur))
			slots = append(slots, slot{st: st, sk: sk, kind: 0, cur: cur})
			if c, ok := backlogCmd(r.client, sk, nowMs); ok {
				cmds = append(cmds, c)
				slots = append(slots, slot{st: st, sk: sk, kind: 1})
			}
		}
	}
	r.curMu.Unlock()

	results := make([]valkey.ValkeyResult, 0, len(cmds))
	for i := 0; i < len(cmds); i += pipelineChunk {
		results = append(results, r.client.DoMulti(ctx, cmds[i:min(i+pipelineChunk, len(cmds))]...)...)
	}
	for i, res := range results {
		s := slots[i]
		st := s.st
		if s.kind == 1 {
			n, err := res.AsInt64()
			if err != nil {
				st.sampled = false
				sum.addErr(classify(err), "backlog", 1)
				continue
			}
			st.backlog += n
			continue
		}
		if err := sw.parseRead(res, s.sk, s.cur, st, nowMs); err != nil {
			st.fetchError = true
			st.sampled = false
			sum.addErr(classify(err), "fetch", 1)
			r.log.Debug("candidate fetch failed", "partition", st.p.Tag(), "key", s.sk.key, "error", err)
		}
	}
	return states
}

func (sw *sweep) parseRead(res valkey.ValkeyResult, sk sourceKey, cur uint64, st *partState, nowMs int64) error {
	batch := sw.batch
	add := func(member string, score float64) {
		st.cands = append(st.cands, scannerapi.Candidate{Source: sk.src.Name, Key: sk.key, Lane: sk.lane, Member: member, Score: score})
	}
	switch sk.src.Kind {
	case scannerapi.SourceSetScan:
		e, err := res.AsScanEntry()
		if err != nil {
			return err
		}
		for _, m := range e.Elements {
			add(m, 0)
		}
		st.next[sk.key] = e.Cursor // 0 once the scan wrapped
	default:
		zs, err := res.AsZScores()
		if err != nil {
			return err
		}
		for _, z := range zs {
			add(z.Member, z.Score)
		}
		if sk.src.Kind == scannerapi.SourceZSetRotate {
			// A short window means the end was reached: wrap.
			if len(zs) < batch {
				st.next[sk.key] = 0
			} else {
				st.next[sk.key] = cur + uint64(batch)
			}
		} else if len(zs) > 0 {
			// Lag is measured against the source's own due bound.
			due := zs[0].Score - float64(sk.src.ScoreOffset.Milliseconds())
			if !st.hasDue || due < st.oldestDue {
				st.oldestDue, st.hasDue = due, true
			}
		}
	}
	return nil
}

// commitCursors advances a partition's cursors once its candidates were
// handled (or there were none); after a failed call they stay, so the
// same window is retried next cycle instead of being skipped.
func (r *Runner) commitCursors(st *partState) {
	if len(st.next) == 0 {
		return
	}
	r.curMu.Lock()
	for k, v := range st.next {
		r.cursors[k] = v
	}
	r.curMu.Unlock()
}
