package wire

import "sync"

// waiters pairs answers that arrive on a stream with the calls waiting
// for them, by sequence number: the callback batches a plugin sends and
// the scan calls the host makes on the socket pair.
type waiters[T any] struct {
	mu   sync.Mutex
	m    map[uint64]chan T
	err  error         // why no more answers come; set before done closes
	done chan struct{} // closed when the stream ended
}

func newWaiters[T any]() *waiters[T] {
	return &waiters[T]{m: map[uint64]chan T{}, done: make(chan struct{})}
}

// add registers a call; its answer comes on the returned channel. It
// fails with the stream's end once the stream has ended.
func (w *waiters[T]) add(seq uint64) (chan T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return nil, w.err
	}
	ch := make(chan T, 1)
	w.m[seq] = ch
	return ch, nil
}

// forget drops a call that gave up; its answer, if one comes, is dropped.
func (w *waiters[T]) forget(seq uint64) {
	w.mu.Lock()
	delete(w.m, seq)
	w.mu.Unlock()
}

// deliver hands an answer to its call, if it still waits.
func (w *waiters[T]) deliver(seq uint64, v T) {
	w.mu.Lock()
	ch := w.m[seq]
	delete(w.m, seq)
	w.mu.Unlock()
	if ch != nil {
		ch <- v // buffered: never blocks
	}
}

// end records that no more answers come, and why (the first reason
// counts).
func (w *waiters[T]) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
		w.m = nil
		close(w.done)
	}
}

// ended is closed once the stream ended; reason says why.
func (w *waiters[T]) ended() <-chan struct{} { return w.done }

func (w *waiters[T]) reason() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
