package scanutil

import (
	"sync"
	"weak"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Memory remembers index entries a scanner examined and left in place
// (an execution already expired, a flow with nothing left to do, an entry
// not due before some time), so that it does not spend commands on them
// again every cycle. It is safe for concurrent use by the scans of
// different partitions.
//
// Memory is a cache of the store, never a source of truth. The rules that
// keep it so (the host's "derived state never outlives its source"):
//
//   - Remember only what was read back from the server in this scan (a
//     function's reply saying the entry is left as it is, a field read),
//     never what a command was only expected to do: a write the server
//     acknowledged can still be lost in a failover.
//   - An entry is bound to the index score it was read at: an entry seen
//     again with another score is a new entry and is forgotten (Recall).
//   - Entries expire ttl cycles after they were remembered, so they are
//     re-verified against the store; a cycle number that goes backwards
//     (a host restart) expires them too.
//   - On an outage (IsOutage, an Exec error) or a change of options, call
//     Reset: what happened to the commands in flight is unknown.
//   - When the host's store epoch changes (a failover, a topology change,
//     a failed read), the SDK resets every Memory of the process by
//     itself: the host sees failures a scanner may never see, such as a
//     master that failed over between two scans.
//
// Memory holds at most a fixed number of entries; past that, Remember
// refuses new ones (the scanner then simply re-reads them).
type Memory[V any] struct {
	limit int

	mu       sync.Mutex
	parts    map[uint16]map[string]memEntry[V]
	n        int
	full     bool
	swept    uint64
	sweptAny bool
}

type memEntry[V any] struct {
	score float64
	v     V
	at    uint64 // cycle remembered
	ttl   uint64 // cycles valid; 0: until forgotten
}

// NewMemory returns a memory of at most limit entries. It is reset
// whenever the host's store epoch changes (scannerapi.OnStoreRewound).
func NewMemory[V any](limit int) *Memory[V] {
	m := &Memory[V]{limit: limit, parts: map[uint16]map[string]memEntry[V]{}}
	// Weakly held: a memory nobody uses any more can be collected.
	w := weak.Make(m)
	scannerapi.OnStoreRewound(func() {
		if m := w.Value(); m != nil {
			m.Reset()
		}
	})
	return m
}

func (e memEntry[V]) valid(now uint64) bool {
	if now < e.at {
		return false
	}
	return e.ttl == 0 || now-e.at < e.ttl
}

// Remember records v for member of partition part, read at score in cycle
// now, valid for ttl cycles (0: until forgotten or re-scored; use it only
// for entries the scanner re-examines on its own, such as one due at a
// known time). stored is false when the memory is full; firstFull is true
// the first time that happens since it last had room, for one log line.
func (m *Memory[V]) Remember(part uint16, member string, score float64, v V, now, ttl uint64) (stored, firstFull bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(now)
	pm := m.parts[part]
	if _, ok := pm[member]; !ok {
		if m.n >= m.limit {
			firstFull = !m.full
			m.full = true
			return false, firstFull
		}
		if pm == nil {
			pm = map[string]memEntry[V]{}
			m.parts[part] = pm
		}
		m.n++
	}
	pm[member] = memEntry[V]{score: score, v: v, at: now, ttl: ttl}
	return true, false
}

// Recall returns what is remembered of member, read now at score. An entry
// remembered with another score, or expired, is forgotten and not
// returned.
func (m *Memory[V]) Recall(part uint16, member string, score float64, now uint64) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(now)
	e, ok := m.parts[part][member]
	if !ok {
		var zero V
		return zero, false
	}
	if e.score != score || !e.valid(now) {
		m.deleteLocked(part, member)
		var zero V
		return zero, false
	}
	return e.v, true
}

// Peek is Recall without its effects: what is remembered of member at
// score and now, by the same rule (another score or an expired entry is
// not remembered), leaving the memory as it is. An explanation asks it.
func (m *Memory[V]) Peek(part uint16, member string, score float64, now uint64) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.parts[part][member]
	if !ok || e.score != score || !e.valid(now) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Entry is a remembered entry handed out by Entries.
type Entry[V any] struct {
	Member string
	Score  float64
	Value  V
}

// Entries returns partition part's valid entries for which keep returns
// true (nil keeps all), in no particular order.
func (m *Memory[V]) Entries(part uint16, now uint64, keep func(Entry[V]) bool) []Entry[V] {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(now)
	var out []Entry[V]
	for member, e := range m.parts[part] {
		if !e.valid(now) {
			continue
		}
		en := Entry[V]{Member: member, Score: e.score, Value: e.v}
		if keep == nil || keep(en) {
			out = append(out, en)
		}
	}
	return out
}

// Count returns how many valid entries partition part has.
func (m *Memory[V]) Count(part uint16, now uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked(now)
	n := 0
	for _, e := range m.parts[part] {
		if e.valid(now) {
			n++
		}
	}
	return n
}

// Forget drops member of partition part.
func (m *Memory[V]) Forget(part uint16, member string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleteLocked(part, member)
}

// ForgetPartition drops every entry of partition part (a scan of it failed
// in a way that leaves its state unknown).
func (m *Memory[V]) ForgetPartition(part uint16) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n -= len(m.parts[part])
	delete(m.parts, part)
	m.full = false
}

// Reset drops every entry.
func (m *Memory[V]) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts = map[uint16]map[string]memEntry[V]{}
	m.n, m.full = 0, false
}

// Len returns the number of entries held (valid or not yet swept).
func (m *Memory[V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

func (m *Memory[V]) deleteLocked(part uint16, member string) {
	pm := m.parts[part]
	if _, ok := pm[member]; !ok {
		return
	}
	delete(pm, member)
	if len(pm) == 0 {
		delete(m.parts, part)
	}
	m.n--
	m.full = false
}

// sweepLocked drops expired entries, at most once per cycle: entries of
// partitions no longer scanned must not hold the memory's room forever.
func (m *Memory[V]) sweepLocked(now uint64) {
	if m.sweptAny && m.swept == now {
		return
	}
	m.sweptAny, m.swept = true, now
	for part, pm := range m.parts {
		for member, e := range pm {
			if !e.valid(now) {
				delete(pm, member)
				m.n--
				m.full = false
			}
		}
		if len(pm) == 0 {
			delete(m.parts, part)
		}
	}
}
