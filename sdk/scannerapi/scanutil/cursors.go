package scanutil

import "sync"

// Cursors keeps, per key (a partition index, a partition and lane...),
// where the next page of a sorted set starts, for scanners that read past
// the host's window a bounded amount per scan and resume next time. It is
// safe for concurrent use by the scans of different partitions.
//
// A cursor is a hint, not knowledge: a scan that resumes at one still
// reads the members it acts on, and a lost cursor only means starting
// again from the top. Reset them on an outage or a change of options.
type Cursors[K comparable] struct {
	mu sync.Mutex
	m  map[K]ZPos
}

// Get returns k's cursor, if it has one.
func (c *Cursors[K]) Get(k K) (ZPos, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[k]
	return p, ok
}

// Set stores k's cursor.
func (c *Cursors[K]) Set(k K, p ZPos) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[K]ZPos)
	}
	c.m[k] = p
}

// Clear drops k's cursor: the next page starts from the top.
func (c *Cursors[K]) Clear(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// Reset drops every cursor.
func (c *Cursors[K]) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

// Len returns the number of cursors kept.
func (c *Cursors[K]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
