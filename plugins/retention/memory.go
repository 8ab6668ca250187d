package retention

// This file is what the scanner remembers of entries it left in place
// (overrides not yet due, entries to recheck) on scanutil.Memory.

import (
	"sort"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// memo is what the scanner read of an entry it left in place (its index
// score is the memory's key with the member).
type memo struct {
	lane    string
	dueAt   int64  // look again at this server time (ms), when recheck is 0
	recheck uint64 // look again at this cycle (filtered, not terminal, failing)
}

func (sc *scan) remember(it *item, m memo) {
	if sc.req.DryRun {
		return
	}
	m.lane = it.lane
	// ttl 0: memoDue decides when the entry is looked at again (its due
	// time, or its recheck cycle).
	if stored, first := sc.s.memo.Remember(sc.req.Partition.Index, it.member, it.score, m, sc.req.Cycle, 0); !stored && first {
		sc.log.Warn("retention memory is full; entries left in place are re-read, and shorter overrides wait for the default, until it drains", "limit", memoLimit)
	}
}

// remembered is a due memo entry handed to a scan.
type remembered struct {
	member string
	id     keys.ExecutionID
	lane   string
	score  float64
}

func memoDue(m memo, nowMs int64, cycle uint64) bool {
	if m.recheck != 0 {
		return m.recheck <= cycle || m.recheck > cycle+stuckCycles
	}
	return m.dueAt <= nowMs
}

// dueMemos returns up to limit remembered entries of a partition that are
// due, oldest first, and how many are due in all.
func (s *Scanner) dueMemos(part uint16, nowMs int64, cycle uint64, limit int) ([]remembered, int) {
	entries := s.memo.Entries(part, cycle, func(e scanutil.Entry[memo]) bool { return memoDue(e.Value, nowMs, cycle) })
	out := make([]remembered, 0, len(entries))
	for _, e := range entries {
		id, err := keys.ParseExecutionID(e.Member)
		if err != nil {
			continue
		}
		out = append(out, remembered{member: e.Member, id: id, lane: e.Value.lane, score: e.Score})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].score != out[j].score {
			return out[i].score < out[j].score
		}
		return out[i].member < out[j].member
	})
	total := len(out)
	if total > limit {
		out = out[:limit]
	}
	return out, total
}
