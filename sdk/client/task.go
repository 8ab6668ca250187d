package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ffscan/ffscan/keys"
)

// Task is one claimed execution: the lease this worker holds on it, its
// input, and the calls that end it. Its lease is renewed in the background
// until Complete, Fail, Cancel or Abandon; if the lease is lost, Context is
// cancelled with a *LeaseLostError cause.
//
// Complete, Fail and Cancel are idempotent against replays: after a
// transport error (the call may or may not have committed) call the same
// method again; a call that finds its own earlier commit reports
// Outcome.AlreadyApplied instead of an error.
type Task struct {
	w            *Worker
	id           keys.ExecutionID
	lane         string
	kind         string
	payload      []byte
	tags         map[string]string
	attemptIndex uint32
	attemptID    string
	leaseID      string
	epoch        string
	attemptType  string
	retryJSON    string // the execution's retry policy, sent with Fail

	// A Suspend whose reply was lost is retried with the same idempotency
	// key and ids (guarded by mu); cleared once the library answered.
	suspendSeq  int
	suspendIdem string
	suspendID   keys.UUID
	suspendWP   keys.UUID

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	finished bool
	renewOff chan struct{} // closed to stop renewing
	renewEnd chan struct{} // closed when the renewal goroutine returned
	expires  time.Time     // local estimate of the lease expiry
	stopOnce sync.Once
}

// claim is what a successful claim, resume-claim or reclaim returned.
type claim struct {
	id           keys.ExecutionID
	lane         string
	kind         string
	payload      []byte
	tags         map[string]string
	attemptIndex uint32
	attemptID    string
	leaseID      string
	epoch        string
	attemptType  string
	retryJSON    string
	sentAt       time.Time // when the claim was sent: the lease started no earlier
}

// newTask wraps a successful claim (holding a permit) and starts renewing.
func (w *Worker) newTask(cl claim) *Task {
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &Task{
		w: w, id: cl.id, lane: cl.lane, kind: cl.kind, payload: cl.payload, tags: cl.tags,
		attemptIndex: cl.attemptIndex, attemptID: cl.attemptID, leaseID: cl.leaseID,
		epoch: cl.epoch, attemptType: cl.attemptType, retryJSON: cl.retryJSON,
		ctx: ctx, cancel: cancel,
		renewOff: make(chan struct{}), renewEnd: make(chan struct{}),
		expires: cl.sentAt.Add(w.opts.LeaseTTL),
	}
	w.track(t)
	go t.renewLoop(cl.sentAt)
	return t
}

// ID is the execution id.
func (t *Task) ID() keys.ExecutionID { return t.id }

// Lane is the lane the execution was claimed from.
func (t *Task) Lane() string { return t.lane }

// Kind is the execution kind given at create.
func (t *Task) Kind() string { return t.kind }

// Payload is the execution's input.
func (t *Task) Payload() []byte { return t.payload }

// Tags are the execution's tags as read at claim time.
func (t *Task) Tags() map[string]string { return t.tags }

// AttemptIndex is the 0-based attempt this lease runs.
func (t *Task) AttemptIndex() uint32 { return t.attemptIndex }

// AttemptID is the attempt's id (part of the lease fence).
func (t *Task) AttemptID() string { return t.attemptID }

// AttemptType is initial, retry, replay, reclaim or resumed.
func (t *Task) AttemptType() string { return t.attemptType }

// LeaseID is the lease's id (part of the fence).
func (t *Task) LeaseID() string { return t.leaseID }

// LeaseEpoch is the lease epoch (part of the fence).
func (t *Task) LeaseEpoch() uint64 {
	n, _ := strconv.ParseUint(t.epoch, 10, 64)
	return n
}

// Context is cancelled when the task can no longer act on its execution:
// the lease was lost (cause *LeaseLostError), the task finished (cause
// ErrTaskFinished) or was abandoned (cause ErrTaskAbandoned). Read the
// cause with context.Cause.
func (t *Task) Context() context.Context { return t.ctx }

// LeaseExpiresAt is the local estimate of when the current lease runs out.
func (t *Task) LeaseExpiresAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expires
}

// Errors that end a task's context.
var (
	// ErrLeaseLost matches every *LeaseLostError.
	ErrLeaseLost = errors.New("lease lost")
	// ErrTaskFinished: Complete, Fail or Cancel reached a definitive answer.
	ErrTaskFinished = errors.New("task finished")
	// ErrTaskAbandoned: Abandon was called (or the worker closed first).
	ErrTaskAbandoned = errors.New("task abandoned")
)

// LeaseLostError says the worker no longer holds the execution: a renewal
// was refused (Err is the library's error: stale_lease, lease_expired,
// lease_revoked, execution_not_active...) or renewals kept failing until
// the lease ran out locally.
type LeaseLostError struct {
	ExecutionID keys.ExecutionID
	Err         error
}

// Error names the execution and why the lease is gone.
func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("lease on %s lost: %v", e.ExecutionID, e.Err)
}

// Unwrap exposes the renewal error.
func (e *LeaseLostError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLeaseLost) hold.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// Abandon drops the task without telling Valkey, like a crashed process:
// renewal stops, the permit returns, and the lease lapses so another worker
// can reclaim the execution once it is marked expired. Abandoning a
// finished task does nothing.
func (t *Task) Abandon() {
	if t.markFinished() {
		t.end(ErrTaskAbandoned)
	}
}

// markFinished flips the task to finished once; it reports whether this
// call did it (and so owns the cleanup).
func (t *Task) markFinished() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return false
	}
	t.finished = true
	return true
}

func (t *Task) isFinished() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finished
}

// end stops renewing, returns the permit and cancels the context.
func (t *Task) end(cause error) {
	t.stopRenewing()
	<-t.renewEnd
	t.cancel(cause)
	t.w.untrack(t)
	t.w.release()
}

func (t *Task) stopRenewing() {
	t.stopOnce.Do(func() { close(t.renewOff) })
}
