package postgres

import (
	"context"
	"math"
	"slices"
	"sync"

	"github.com/ffscan/ffscan/host/service"
)

// ActionSlots bound the action transactions a host runs at once on its
// pool (its scanners' PGCALLs, the completion listener's dispatches) to
// its part of a budget the hosts sharing one database divide among them
// (postgres.shared_transactions): the budget times the share of the
// partitions the host owns, rounded, at least one.
//
// Why: each host's pool has its own size, so with three hosts three times
// as many batches ran at once on the one server as with one. On two cores
// that did not end the work sooner: a lapsed-lease batch took 12 ms with
// one host and 62 ms with three, whose 9-12 busy sessions waited on the
// CPU and on the lock every notifying commit takes. Divided, the hosts
// run about as many transactions at once as one host did, so adding a
// host adds the capacity of its own process without adding contention at
// the database.
//
// Slots are given in the order they were asked for: a caller never
// overtakes one already waiting, so no dispatch or PGCALL waits behind an
// endless stream of later ones. The size is read at every Acquire and
// every release from the share as it is then, so a host that takes a dead
// host's partitions gets their slots at once. The candidate reads, the
// clock and the share's own renewals never take a slot: the renewals in
// particular must never wait behind work, or the host would lose its
// share under load.
//
// A nil *ActionSlots bounds nothing. Safe for concurrent use.
type ActionSlots struct {
	total int
	share func() (owned, all int)

	mu   sync.Mutex
	used int
	// queue are the callers waiting for a slot, the first asked first;
	// each one's channel is closed when it is given one.
	queue []chan struct{}
	// queued is told whenever a caller starts waiting (WaitForWaiters).
	queued service.Changes
}

// NewActionSlots returns slots for a host's part of total (at least 1).
// share reports how many of the deployment's partitions the host owns now
// and how many there are; nil, or a share of nothing known (all 0), gives
// the host the whole budget: a host that shares nothing runs alone.
func NewActionSlots(total int, share func() (owned, all int)) *ActionSlots {
	return &ActionSlots{total: max(total, 1), share: share}
}

// SlotsFor is the host's part of total when it owns owned of all
// partitions: total x owned / all rounded to the nearest, at least 1 (a
// host that owns nothing yet still finishes what it started), at most
// total. Rounded to the nearest, the parts of hosts with equal shares add
// up to about total (three hosts of a budget of 4: 1 each; two: 2 each).
func SlotsFor(total, owned, all int) int {
	total = max(total, 1)
	if all <= 0 {
		return total
	}
	n := int(math.Round(float64(total) * float64(owned) / float64(all)))
	return min(max(n, 1), total)
}

// Size returns the number of slots now.
func (s *ActionSlots) Size() int {
	if s == nil {
		return 0
	}
	if s.share == nil {
		return s.total
	}
	owned, all := s.share()
	return SlotsFor(s.total, owned, all)
}

// Total returns the budget the hosts divide.
func (s *ActionSlots) Total() int {
	if s == nil {
		return 0
	}
	return s.total
}

// Acquire takes a slot, waiting behind the callers already waiting while
// all are in use; the returned function gives it back (call it once). It
// fails only when ctx ends first.
func (s *ActionSlots) Acquire(ctx context.Context) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	size := s.Size() // outside the lock: share() takes the coordinator's
	s.mu.Lock()
	s.grantLocked(size) // the size may have grown since the last release
	if len(s.queue) == 0 && s.used < size {
		s.used++
		s.mu.Unlock()
		return s.releaser(), nil
	}
	ready := make(chan struct{})
	s.queue = append(s.queue, ready)
	s.mu.Unlock()
	s.queued.Notify()
	select {
	case <-ready:
		return s.releaser(), nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-ready:
		// Given a slot as ctx ended: give it on.
		s.mu.Unlock()
		s.release()
	default:
		s.queue = slices.DeleteFunc(s.queue, func(c chan struct{}) bool { return c == ready })
		s.mu.Unlock()
	}
	return nil, ctx.Err()
}

// grantLocked gives free slots to the callers waiting, the first first.
func (s *ActionSlots) grantLocked(size int) {
	for len(s.queue) > 0 && s.used < size {
		s.used++
		close(s.queue[0])
		s.queue = s.queue[1:]
	}
}

func (s *ActionSlots) releaser() func() {
	var once sync.Once
	return func() { once.Do(s.release) }
}

func (s *ActionSlots) release() {
	size := s.Size()
	s.mu.Lock()
	s.used--
	s.grantLocked(size)
	s.mu.Unlock()
}

// InUse returns the slots taken and the callers waiting for one.
func (s *ActionSlots) InUse() (used, waiting int) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, len(s.queue)
}

// WaitForWaiters returns once at least n callers wait for a slot, or when
// ctx ends (with its error): what a caller that holds the slots waits on
// to know that another call reached them.
func (s *ActionSlots) WaitForWaiters(ctx context.Context, n int) error {
	return s.queued.WaitFor(ctx, func() bool {
		_, waiting := s.InUse()
		return waiting >= n
	})
}
