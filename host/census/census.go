// Package census keeps the set of lane index keys that exist, so that
// lane-scoped sources read only the lanes that have entries.
//
// A lane-scoped source (ff:idx:{p}:lane:{lane}:delayed, ...) has one key
// per partition and lane. Read directly, an idle host costs partitions x
// lanes key lookups per source and interval, and building those keys costs
// the host as much: with thousands of lanes that is most of the load it
// puts on an idle Valkey. But a set or sorted set ceases to exist with its
// last member, so the keys of empty lanes simply are not there, and a SCAN
// of the keyspace (MATCH ff:idx:*:lane:*) visits every existing key once,
// at a cost that grows with the keyspace and not with the lanes. The
// census repeats such passes, paced over half the shortest interval of the
// lane-scoped scanners, and the scheduler reads only the lane keys the
// latest passes saw. A key created after the pass went by is seen by the
// next one: within one interval, so an entry in a lane that was empty is
// handled within twice the interval.
//
// The census is derived from the store and is trusted only while the
// store is the one it was read from: a pass counts only when the host's
// store epoch did not change while it ran, and a change makes the census
// unknown (the scheduler then reads every lane key) until a new pass
// completes. Keys seen in the pass in progress count at once, keys of the
// last complete pass until the next completes, so a key is never missing
// from the census while it existed for a whole pass.
package census

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/lanes"
)

// MaxKeys bounds the keys a census holds; a keyspace with more lane keys
// is read directly (the census would cost more than it saves).
const MaxKeys = 1_000_000

// Census is the set of existing lane index keys, by partition tag. Safe
// for concurrent use.
type Census struct {
	client valkey.Client
	epoch  func() uint64

	mu sync.Mutex
	// The last complete pass (ready), and the epoch it began in.
	last      map[string][]string
	lastEpoch uint64
	ready     bool
	// The pass in progress.
	cur      map[string][]string
	curKeys  int
	curEpoch uint64
	cursors  map[string]uint64 // per primary; absent: not started this pass
	done     map[string]bool   // primaries whose part of the pass ended
	tooMany  bool
	enabled  bool
	// resets counts Reset calls (the census forgotten and warming again).
	resets uint64
}

// New returns an empty census (unknown until a pass completes). epoch is
// the host's store epoch.
func New(client valkey.Client, epoch func() uint64) *Census {
	return &Census{client: client, epoch: epoch}
}

// Keys returns the lane keys of partition tag ("{fp:3}") that exist as far
// as the census knows, and whether it knows (a pass completed in the
// current store epoch). The slice must not be modified.
func (c *Census) Keys(tag string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled || !c.ready || c.epoch() != c.lastEpoch || c.tooMany {
		return nil, false
	}
	a, b := c.last[tag], c.cur[tag]
	if len(b) == 0 {
		return a, true
	}
	if len(a) == 0 {
		return b, true
	}
	// A key seen by both passes is listed once.
	out := make([]string, 0, len(a)+len(b))
	seen := make(map[string]bool, len(a))
	for _, k := range a {
		seen[k] = true
		out = append(out, k)
	}
	for _, k := range b {
		if !seen[k] {
			out = append(out, k)
		}
	}
	return out, true
}

// Ready reports whether the census is known now.
func (c *Census) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enabled && c.ready && c.epoch() == c.lastEpoch && !c.tooMany
}

// State is "on" (in use), "warming" (enabled, not known yet) or "off".
func (c *Census) State() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.enabled:
		return "off"
	case c.ready && c.epoch() == c.lastEpoch && !c.tooMany:
		return "on"
	}
	return "warming"
}

// SetEnabled turns the census on (it is used once a pass completed) or
// off (forgotten: the scheduler reads every lane's key).
func (c *Census) SetEnabled(on bool) {
	c.mu.Lock()
	c.enabled = on
	c.mu.Unlock()
	if !on {
		c.Reset()
	}
}

// InPass reports whether a pass is in progress.
func (c *Census) InPass() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cursors != nil
}

// Reset forgets everything: the census is unknown until a new pass
// completes.
func (c *Census) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready, c.last, c.cur, c.cursors, c.done, c.tooMany = false, nil, nil, nil, nil, false
	c.resets++
}

// Resets returns how many times the census was forgotten.
func (c *Census) Resets() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resets
}

// Step reads up to pages SCAN pages from every primary and reports whether
// a pass completed (and was kept) in it. A failed read makes the pass
// start over; a pass during which the store epoch changed is dropped.
func (c *Census) Step(ctx context.Context, pages int) (bool, error) {
	nodes := c.client.Nodes()
	c.mu.Lock()
	if c.cursors == nil {
		c.cur, c.curKeys, c.curEpoch = map[string][]string{}, 0, c.epoch()
		c.cursors, c.done = map[string]uint64{}, map[string]bool{}
	}
	c.mu.Unlock()
	for addr, node := range nodes {
		c.mu.Lock()
		finished := c.done[addr]
		cursor, started := c.cursors[addr]
		c.mu.Unlock()
		if finished {
			continue
		}
		if !started {
			// Once per node and pass: replicas hold copies of their
			// primary's keys and are skipped.
			primary, err := lanes.IsPrimary(ctx, node)
			if err != nil {
				c.restart()
				return false, fmt.Errorf("census: node %s: ROLE: %w", addr, err)
			}
			if !primary {
				c.mu.Lock()
				c.done[addr] = true
				c.mu.Unlock()
				continue
			}
		}
		for n := 0; n < pages; n++ {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(lanes.Pattern).Count(lanes.PageSize).Build()).AsScanEntry()
			if err != nil {
				c.restart()
				return false, fmt.Errorf("census: node %s: SCAN: %w", addr, err)
			}
			c.add(e.Elements)
			cursor = e.Cursor
			if cursor == 0 {
				break
			}
		}
		c.mu.Lock()
		c.cursors[addr] = cursor
		if cursor == 0 {
			c.done[addr] = true
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr := range nodes {
		if !c.done[addr] {
			return false, nil
		}
	}
	// Every primary's pass ended: keep it if the store stayed the same.
	kept := c.epoch() == c.curEpoch && !c.tooMany
	if kept {
		c.last, c.lastEpoch, c.ready = c.cur, c.curEpoch, true
	}
	c.cur, c.cursors, c.done = nil, nil, nil
	c.tooMany = false
	return kept, nil
}

func (c *Census) add(ks []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range ks {
		tag, ok := tagOf(k)
		if !ok {
			continue
		}
		if c.curKeys >= MaxKeys {
			c.tooMany = true
			return
		}
		c.cur[tag] = append(c.cur[tag], k)
		c.curKeys++
	}
}

func (c *Census) restart() {
	c.mu.Lock()
	c.cur, c.cursors, c.done = nil, nil, nil
	c.mu.Unlock()
}

// tagOf returns the "{...}" partition tag of a lane key.
func tagOf(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, "ff:idx:")
	if !ok || !strings.HasPrefix(rest, "{") {
		return "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return "", false
	}
	return rest[:i+1], true
}
