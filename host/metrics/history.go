package metrics

import (
	"sync"
	"time"
)

// HistoryLen is how many cycles of each scanner the history keeps: a
// console chart's width.
const HistoryLen = 120

// Sample is a scanner's backlog and lag at the end of one full cycle.
type Sample struct {
	// Backlog is -1 where the cycle did not measure every partition.
	Backlog int64
	Lag     time.Duration
	// Processed counts the items the cycle acted on.
	Processed int64
}

// history keeps the last HistoryLen samples of each scanner in memory,
// for the console's charts: a cache of what the cycles reported, gone
// with the process.
//
// A full cycle's recorder calls come in the order Cycle, Items, then
// Backlog and Lag when they were measured: the sample Cycle opens takes
// the rest, and joins the ring when the next full cycle opens its own
// (History shows it before that).
type history struct {
	mu   sync.Mutex
	cur  map[string]*Sample  // the last full cycle's, still taking values
	last map[string][]Sample // ring per scanner, oldest first
}

func newHistory() *history {
	return &history{cur: map[string]*Sample{}, last: map[string][]Sample{}}
}

func (h *history) backlog(scanner string, v int64) {
	h.mu.Lock()
	if s := h.cur[scanner]; s != nil {
		s.Backlog = v
	}
	h.mu.Unlock()
}

func (h *history) lag(scanner string, d time.Duration) {
	h.mu.Lock()
	if s := h.cur[scanner]; s != nil {
		s.Lag = d
	}
	h.mu.Unlock()
}

func (h *history) items(scanner string, processed int64) {
	h.mu.Lock()
	if s := h.cur[scanner]; s != nil {
		s.Processed += processed
	}
	h.mu.Unlock()
}

// cycle opens a full cycle's sample; the previous one joins the ring.
func (h *history) cycle(scanner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.cur[scanner]; s != nil {
		ring := append(h.last[scanner], *s)
		if len(ring) > HistoryLen {
			ring = append(ring[:0], ring[len(ring)-HistoryLen:]...)
		}
		h.last[scanner] = ring
	}
	h.cur[scanner] = &Sample{Backlog: -1}
}

// History returns the last full cycles' samples of scanner, oldest
// first (a copy), the last one included.
func (m *Metrics) History(scanner string) []Sample {
	m.hist.mu.Lock()
	defer m.hist.mu.Unlock()
	out := make([]Sample, 0, len(m.hist.last[scanner])+1)
	out = append(out, m.hist.last[scanner]...)
	if s := m.hist.cur[scanner]; s != nil {
		out = append(out, *s)
	}
	if len(out) > HistoryLen {
		out = out[len(out)-HistoryLen:]
	}
	return out
}
