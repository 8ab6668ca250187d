package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Handler runs one task. Returning (result, nil) completes the execution
// with result; returning an error fails it (with FailError's category, if
// the error is one) under the execution's retry policy. A handler may also
// end the task itself with Complete, Fail or Cancel; Run then does
// nothing more. ctx is the task's Context: it is cancelled when the lease
// is lost.
type Handler func(ctx context.Context, t *Task) ([]byte, error)

// FailError lets a handler choose the failure category Run records.
type FailError struct {
	Category string
	Err      error
}

// Error is "<category>: <cause>", the reason Run records.
func (e *FailError) Error() string { return e.Category + ": " + e.Err.Error() }

// Unwrap exposes the cause.
func (e *FailError) Unwrap() error { return e.Err }

// Run claims and handles tasks until ctx is cancelled or the worker is
// closed, running up to MaxConcurrentTasks handlers at once. When idle it
// first sweeps every partition of every lane without pausing, then sleeps
// from PollInterval doubling up to MaxPollInterval, and resets on work.
// Claim errors are logged and retried after a pause. On return every
// handler Run started has finished. It returns nil when ctx was cancelled
// and ErrWorkerClosed or a *DuplicateInstanceError otherwise.
func (w *Worker) Run(ctx context.Context, h Handler) error {
	var handlers sync.WaitGroup
	defer handlers.Wait()
	idle := 0
	sleep := w.opts.PollInterval
	chunks := (int(w.c.parts.Flow) + PartitionScanChunk - 1) / PartitionScanChunk
	sweep := chunks * len(w.opts.Lanes)
	for {
		if err := w.acquire(ctx); err != nil {
			return runExit(ctx, err)
		}
		if err := w.usable(); err != nil {
			w.release()
			return err
		}
		t, err := w.claimNext(ctx)
		if t == nil {
			w.release()
		}
		switch {
		case ctx.Err() != nil:
			if t != nil {
				// Claimed just as we were told to stop. Abandoning it would
				// delay it by a whole lease TTL; run it like any other (Run
				// waits for its handler before returning).
				handlers.Add(1)
				go w.handle(&handlers, t, h)
			}
			return nil
		case err != nil:
			w.log.Warn("claim failed", "error", err)
			if !pause(ctx, w.closing, w.opts.MaxPollInterval) {
				return runExit(ctx, ErrWorkerClosed)
			}
		case t == nil:
			idle++
			if idle < sweep {
				continue
			}
			if !pause(ctx, w.closing, sleep) {
				return runExit(ctx, ErrWorkerClosed)
			}
			sleep = min(2*sleep, w.opts.MaxPollInterval)
		default:
			idle, sleep = 0, w.opts.PollInterval
			handlers.Add(1)
			go w.handle(&handlers, t, h)
		}
	}
}

func runExit(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// pause sleeps d unless ctx ends or the worker closes (false then).
func pause(ctx context.Context, closing <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-closing:
		return false
	case <-ctx.Done():
		return false
	}
}

// handle runs the handler and ends the task by its verdict.
func (w *Worker) handle(wg *sync.WaitGroup, t *Task, h Handler) {
	defer wg.Done()
	result, err := runHandler(t, h)
	if t.isFinished() {
		return
	}
	if cause := context.Cause(t.ctx); errors.Is(cause, ErrLeaseLost) {
		w.log.Warn("handler ran past its lease; result is dropped by the fence", "execution_id", t.id, "cause", cause)
	}
	end := func(ctx context.Context) (Outcome, error) {
		if err == nil {
			return t.Complete(ctx, result)
		}
		var fe *FailError
		category := "handler_error"
		if errors.As(err, &fe) {
			category = fe.Category
		}
		return t.Fail(ctx, err.Error(), FailOptions{Category: category})
	}
	// Retry transport errors while the lease may still be valid: the ending
	// calls are idempotent, so a retry after a lost reply is safe.
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, ferr := end(ctx)
		cancel()
		if ferr == nil || t.isFinished() {
			if ferr != nil {
				w.log.Warn("ending task refused", "execution_id", t.id, "error", ferr)
			}
			return
		}
		if try >= 4 || time.Now().After(t.LeaseExpiresAt()) {
			w.log.Error("could not end task; abandoning it to lease expiry", "execution_id", t.id, "error", ferr)
			t.Abandon()
			return
		}
		time.Sleep(time.Duration(100<<try) * time.Millisecond)
	}
}

// runHandler calls h, turning a panic into a failure so one bad task does
// not take the worker down.
func runHandler(t *Task, h Handler) (result []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &FailError{Category: "panic", Err: fmt.Errorf("handler panicked: %v", p)}
		}
	}()
	return h(t.ctx, t)
}
