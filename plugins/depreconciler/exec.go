package depreconciler

import (
	"context"
	"fmt"
	"sync"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// scanExec is the executor one scan hands to the resolver (and the filter):
// it forwards every batch to the host and, on the way,
//
//   - prepends commands queued by the scan (ZREMs of garbage members) to
//     the first batch it forwards, so they cost no round trip of their own;
//   - attributes failed commands to the blocked children they concern, for
//     the failure tracker: a command on a child's own keys (its core, its
//     unresolved set, its dep records, the FCALLs on it), or the read of an
//     upstream core that one of the children waits on (the upstream each
//     dep record names is seen in the reply to its read); a batch in which
//     every command got no reply is an outage and attributes nothing;
//   - in a dry run, holds every FCALL back (answering a refusal) and
//     remembers what it would have called.
//
// The resolver reports its results for the whole batch, not per child;
// this is how the scanner still backs off a single poison child.
type scanExec struct {
	inner  depresolve.Executor
	dryRun bool

	mu         sync.Mutex
	queued     []scannerapi.Command
	children   map[keys.ExecutionID]bool
	waitsOn    map[keys.ExecutionID][]keys.ExecutionID // upstream -> children
	failed     map[keys.ExecutionID]scannerapi.ErrorClass
	heldBack   []scannerapi.Command // dry run: FCALLs not sent
	queuedReps []scannerapi.Reply   // replies of the queued commands
}

func newScanExec(inner depresolve.Executor, dryRun bool) *scanExec {
	return &scanExec{
		inner: inner, dryRun: dryRun,
		children: map[keys.ExecutionID]bool{},
		waitsOn:  map[keys.ExecutionID][]keys.ExecutionID{},
		failed:   map[keys.ExecutionID]scannerapi.ErrorClass{},
	}
}

// queue adds commands to send with the next batch.
func (x *scanExec) queue(cmds ...scannerapi.Command) {
	x.mu.Lock()
	x.queued = append(x.queued, cmds...)
	x.mu.Unlock()
}

// watch names the children whose failures are tracked.
func (x *scanExec) watch(ids []keys.ExecutionID) {
	x.mu.Lock()
	for _, id := range ids {
		x.children[id] = true
	}
	x.mu.Unlock()
}

// flush sends queued commands that no batch carried.
func (x *scanExec) flush(ctx context.Context) error {
	_, err := x.Exec(ctx, nil)
	return err
}

// Exec implements depresolve.Executor.
func (x *scanExec) Exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	x.mu.Lock()
	pre := x.queued
	x.queued = nil
	x.mu.Unlock()

	out := make([]scannerapi.Reply, len(cmds))
	send := make([]scannerapi.Command, 0, len(pre)+len(cmds))
	send = append(send, pre...)
	at := make([]int, 0, len(cmds)) // index in out of each sent command after pre
	var held []scannerapi.Command
	for i, c := range cmds {
		if _, _, _, fcall := scannerapi.ParseFCall(c); x.dryRun && fcall {
			out[i] = dryRunReply()
			held = append(held, c)
			continue
		}
		send = append(send, c)
		at = append(at, i)
	}
	if len(send) > 0 {
		reps, err := x.inner.Exec(ctx, send)
		if err == nil && len(reps) != len(send) {
			err = fmt.Errorf("host answered %d replies to %d commands", len(reps), len(send))
		}
		if err != nil {
			if len(pre) > 0 {
				x.mu.Lock()
				x.queued = append(pre, x.queued...) // retried with the next batch
				x.mu.Unlock()
			}
			return nil, err
		}
		for k, i := range at {
			out[i] = reps[len(pre)+k]
		}
		x.mu.Lock()
		x.queuedReps = append(x.queuedReps, reps[:len(pre)]...)
		x.mu.Unlock()
	}

	// A batch whose every command got no reply is a connection problem,
	// not any child's: nothing is attributed.
	outage := scanutil.IsOutage(out)

	x.mu.Lock()
	defer x.mu.Unlock()
	x.heldBack = append(x.heldBack, held...)
	for i, c := range cmds {
		if outage {
			break
		}
		r := out[i]
		if isUpstreamRead(c) && !r.Failed() {
			child, ok1 := execOfKey(c[1])
			s, _ := r.Text()
			up, err := keys.ParseExecutionID(s)
			if ok1 && err == nil && x.children[child] {
				x.waitsOn[up] = append(x.waitsOn[up], child)
			}
			continue
		}
		class, ok := tracked(r)
		if !ok {
			continue
		}
		key, ok := scannerapi.FirstKey(c)
		if !ok {
			continue
		}
		id, ok := execOfKey(key)
		if !ok {
			continue
		}
		if x.children[id] {
			x.fail(id, class)
			continue
		}
		for _, child := range x.waitsOn[id] {
			x.fail(child, class)
		}
	}
	return out, nil
}

// fail records the first failure class of a child.
func (x *scanExec) fail(id keys.ExecutionID, class scannerapi.ErrorClass) {
	if _, ok := x.failed[id]; !ok {
		x.failed[id] = class
	}
}

// failure returns the class of a child's failure, if it had one.
func (x *scanExec) failure(id keys.ExecutionID) (scannerapi.ErrorClass, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.failed[id]
	return c, ok
}

// held returns the FCALLs a dry run held back.
func (x *scanExec) held() []scannerapi.Command {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.heldBack
}

// queuedReplies returns the replies of the queued commands sent so far.
func (x *scanExec) queuedReplies() []scannerapi.Reply {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.queuedReps
}
