package scheduler

// This file is what the host's new-key events spare a scanner: partitions
// read empty are not read again until one of their source keys is created.
//
// A source key with no members does not exist (a set or sorted set goes
// with its last member), so a partition whose every source key was found
// absent or empty only has work again once one of them is created, and
// creating a key is what a new-key event announces. On a single server
// the fetch already proves a whole source's keys absent with one EXISTS;
// on a cluster it cannot (one slot per command), and an idle host pays one
// read per partition and source at every interval. With the event feed
// on, such a partition is "quiet": the interval sweep skips it until an
// event names one of its source keys.
//
// Quiet is learned from a read and never outlives what it was learned
// from:
//
//   - only while the feed covers every master, and only within one of the
//     feed's generations: any gap (a subscriber reconnecting, a failover, a
//     resharding, a node added) makes every partition be read again once;
//   - only within one store epoch, and one set of lanes (a lane added
//     after the read has keys the read did not look at);
//   - not when an event for the partition arrived while it was being read
//     (the key may have been created after the read went by);
//   - not for partitions read through the lane census (the census knows
//     keys from its own passes, which may have begun before the feed was
//     on; it keeps lane-scoped reads cheap by itself);
//   - at most QuietFor: a lost event, which the feed cannot see, hides
//     work no longer than that.

import (
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// DefaultQuietFor is how long a partition read empty is skipped at most
// without an event: the longest a lost new-key event can hide work. Long,
// since the feed itself sees every gap it can; every quiet partition is
// read once per this (on an idle cluster, a read per partition and source
// spread over it).
const DefaultQuietFor = 5 * time.Minute

// Events is the host's feed of new-key events (host/keyevents).
type Events interface {
	// Covered returns whether the feed covers every master now, and its
	// generation.
	Covered() (on bool, gen uint64)
	// Watch calls fn for every key created from now on, until cancel.
	Watch(fn func(key string, p keys.Partition, hasPart bool)) (cancel func())
}

// quietSet is one runner's quiet partitions.
type quietSet struct {
	mu sync.Mutex
	// What the marks were learned in: the feed's generation, the store
	// epoch and the lanes' fingerprint.
	gen, epoch, lanes uint64
	marks             map[uint16]time.Time // partition -> when it was read empty
	// events counts the events naming each partition's source keys, so
	// that a read during which one arrived teaches nothing.
	events map[uint16]uint64

	// What events are matched against: the scanner's family and its
	// source keys (set at each sweep from its Info).
	family   keys.Family
	patterns []sourcePattern
}

// sourcePattern is a source key split around its partition tag and lane.
type sourcePattern struct {
	pre, mid, suf string // pre + tag + mid [+ lane + suf]
	lane          bool
}

func patternsOf(info scannerapi.Info) []sourcePattern {
	var out []sourcePattern
	for _, s := range info.Sources {
		if s.Kind == scannerapi.SourcePostgres {
			continue
		}
		pre, rest, ok := strings.Cut(s.Key, "{p}")
		if !ok {
			continue
		}
		mid, suf, lane := strings.Cut(rest, "{lane}")
		out = append(out, sourcePattern{pre: pre, mid: mid, suf: suf, lane: lane})
	}
	return out
}

// matches reports whether key is one of the source keys of the partition
// whose tag is tag.
func (sp sourcePattern) matches(key, tag string) bool {
	head := len(sp.pre) + len(tag) + len(sp.mid)
	if len(key) < head || key[:len(sp.pre)] != sp.pre || key[len(sp.pre):len(sp.pre)+len(tag)] != tag || key[len(sp.pre)+len(tag):head] != sp.mid {
		return false
	}
	if !sp.lane {
		return len(key) == head
	}
	return len(key) > head+len(sp.suf) && strings.HasSuffix(key, sp.suf)
}

// onEvent un-quiets the partition whose source key was created.
func (r *Runner) onEvent(key string, p keys.Partition, hasPart bool) {
	if !hasPart {
		return
	}
	q := &r.quiet
	q.mu.Lock()
	if p.Family != q.family {
		q.mu.Unlock()
		return
	}
	tag := p.Tag()
	woke := false
	for _, sp := range q.patterns {
		if sp.matches(key, tag) {
			if q.events == nil {
				q.events = map[uint16]uint64{}
			}
			q.events[p.Index]++
			_, woke = q.marks[p.Index]
			delete(q.marks, p.Index)
			break
		}
	}
	q.mu.Unlock()
	if woke {
		r.status.update(func(st *Status) { st.Quiet = r.quietCount() })
		r.cfg.Changes.Notify()
	}
}

// quietRead is what a sweep needs to learn quiet partitions from its read:
// the feed's state and the events counts when the read began.
type quietRead struct {
	on          bool
	gen, epoch  uint64
	lanes       uint64
	eventsAtRun map[uint16]uint64
}

// skipQuiet returns the partitions a full sweep reads (the quiet ones are
// left out, and counted), and what learning from the read takes. A
// Postgres scanner's partitions are never quiet: its sources are no keys,
// so no event would ever wake them.
func (sw *sweep) skipQuiet(parts []keys.Partition) ([]keys.Partition, *quietRead) {
	r := sw.r
	ev := r.cfg.Events
	if ev == nil || sw.postgres() {
		return parts, nil
	}
	on, gen := ev.Covered()
	epoch := r.cfg.Epoch.Load()
	lanes := lanesPrint(sw.lanes)
	now := r.clk.Now()
	q := &r.quiet
	q.mu.Lock()
	defer q.mu.Unlock()
	q.family, q.patterns = sw.info.Family, patternsOf(sw.info)
	if !on || gen != q.gen || epoch != q.epoch || lanes != q.lanes {
		// A gap, a new store epoch or new lanes: every partition is read
		// again once.
		q.marks = nil
		q.gen, q.epoch, q.lanes = gen, epoch, lanes
	}
	qr := &quietRead{on: on, gen: gen, epoch: epoch, lanes: lanes, eventsAtRun: make(map[uint16]uint64, len(parts))}
	kept := parts[:0:0]
	for _, p := range parts {
		if at, ok := q.marks[p.Index]; ok {
			if now.Sub(at) < r.cfg.QuietFor {
				sw.sum.Quiet++
				continue
			}
			delete(q.marks, p.Index) // the safety interval: read it once
		}
		kept = append(kept, p)
		qr.eventsAtRun[p.Index] = q.events[p.Index]
	}
	return kept, qr
}

// learnQuiet marks quiet the partitions the read found empty, if nothing
// it was learned from changed meanwhile.
func (sw *sweep) learnQuiet(qr *quietRead, states []*partState) {
	r := sw.r
	if qr == nil || !qr.on {
		return
	}
	if on, gen := r.cfg.Events.Covered(); !on || gen != qr.gen || r.cfg.Epoch.Load() != qr.epoch {
		return
	}
	now := r.clk.Now()
	q := &r.quiet
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gen != qr.gen || q.epoch != qr.epoch || q.lanes != qr.lanes {
		return
	}
	for _, st := range states {
		if st.fetchError || st.censused || st.emptyKeys < st.srcKeys || q.events[st.p.Index] != qr.eventsAtRun[st.p.Index] {
			continue
		}
		if q.marks == nil {
			q.marks = map[uint16]time.Time{}
		}
		q.marks[st.p.Index] = now
	}
}

// quietCount returns how many partitions are quiet now.
func (r *Runner) quietCount() int {
	r.quiet.mu.Lock()
	defer r.quiet.mu.Unlock()
	return len(r.quiet.marks)
}

// lanesPrint is a fingerprint of the lanes (sorted by the keeper).
func lanesPrint(lanes []string) uint64 {
	h := fnv.New64a()
	for _, l := range lanes {
		h.Write([]byte(l))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
