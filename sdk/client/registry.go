package client

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/valkey-io/valkey-go"
)

// DuplicateInstanceError says another live process holds this worker
// instance id. Two processes with one id would clobber each other's lease
// indexes and double-claim work.
type DuplicateInstanceError struct {
	InstanceID string
	Key        string // the alive guard key that is taken
}

// Error names the instance id and the taken key.
func (e *DuplicateInstanceError) Error() string {
	return fmt.Sprintf("duplicate worker_instance_id %q: another process holds %s (wait for it to expire, or use a fresh instance id)", e.InstanceID, e.Key)
}

// register takes the alive guard (SET NX PX) and advertises the worker.
// The guard comes first: a duplicate must not overwrite the live
// process's advertisement.
func (w *Worker) register(ctx context.Context) error {
	vk := w.c.vk
	alive := keys.WorkerAlive(w.ns, w.opts.InstanceID)
	err := vk.Do(ctx, vk.B().Set().Key(alive).Value("1").Nx().PxMilliseconds(w.aliveTTL.Milliseconds()).Build()).Error()
	if valkey.IsValkeyNil(err) {
		return &DuplicateInstanceError{InstanceID: w.opts.InstanceID, Key: alive}
	}
	if err != nil {
		return fmt.Errorf("worker: SET NX %s: %w", alive, err)
	}
	if err := w.advertise(ctx); err != nil {
		_ = vk.Do(ctx, vk.B().Del().Key(alive).Build()).Error()
		return err
	}
	return nil
}

// advertise writes the capability hash (schema 3.8: worker_id, lanes_csv,
// caps_csv, ttl_ms, registered_at_ms, last_heartbeat_ms) with the guard's
// TTL, then adds the instance to the namespace's workers index. The hash
// is written before the index so a scanner that sees the id finds its
// capabilities. The unblock scanner reads caps_csv to decide whether any
// worker can take a route-blocked execution.
func (w *Worker) advertise(ctx context.Context) error {
	vk := w.c.vk
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	capsKey := keys.WorkerCaps(w.ns, w.opts.InstanceID)
	lanes := append([]string(nil), w.opts.Lanes...)
	slices.Sort(lanes)
	cmds := valkey.Commands{
		vk.B().Hset().Key(capsKey).FieldValue().
			FieldValue("worker_id", w.opts.WorkerID).
			FieldValue("lanes_csv", strings.Join(slices.Compact(lanes), ",")).
			FieldValue("caps_csv", w.capsCSV).
			FieldValue("ttl_ms", strconv.FormatInt(w.aliveTTL.Milliseconds(), 10)).
			FieldValue("registered_at_ms", now).
			FieldValue("last_heartbeat_ms", now).Build(),
		vk.B().Pexpire().Key(capsKey).Milliseconds(w.aliveTTL.Milliseconds()).Build(),
		vk.B().Sadd().Key(keys.WorkersIndex(w.ns)).Member(w.opts.InstanceID).Build(),
	}
	for _, r := range vk.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("worker: advertise %s: %w", capsKey, err)
		}
	}
	return nil
}

// refreshLoop keeps the alive guard and the advertisement alive while the
// worker runs (FlowFabric's SDK sets the guard once at startup, so a
// long-running worker's guard lapses; see the compat notes).
func (w *Worker) refreshLoop() {
	defer w.bg.Done()
	tick := time.NewTicker(w.aliveTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-w.closing:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.aliveTTL/3)
		err := w.refresh(ctx)
		cancel()
		if err != nil {
			w.log.Warn("worker registry refresh failed", "error", err)
		}
	}
}

// refresh extends the guard. If the guard vanished (a pause longer than
// its TTL) it is taken again with NX; if someone else took it meanwhile,
// this worker stops claiming: it is now the duplicate.
func (w *Worker) refresh(ctx context.Context) error {
	vk := w.c.vk
	alive := keys.WorkerAlive(w.ns, w.opts.InstanceID)
	capsKey := keys.WorkerCaps(w.ns, w.opts.InstanceID)
	ttl := w.aliveTTL.Milliseconds()
	res := vk.DoMulti(ctx,
		vk.B().Pexpire().Key(alive).Milliseconds(ttl).Build(),
		vk.B().Hset().Key(capsKey).FieldValue().FieldValue("last_heartbeat_ms", strconv.FormatInt(time.Now().UnixMilli(), 10)).Build(),
		vk.B().Pexpire().Key(capsKey).Milliseconds(ttl).Build(),
	)
	for _, r := range res {
		if err := r.Error(); err != nil {
			return err
		}
	}
	if ok, _ := res[0].AsBool(); ok {
		return nil
	}
	err := vk.Do(ctx, vk.B().Set().Key(alive).Value("1").Nx().PxMilliseconds(ttl).Build()).Error()
	if valkey.IsValkeyNil(err) {
		dup := &DuplicateInstanceError{InstanceID: w.opts.InstanceID, Key: alive}
		w.mu.Lock()
		w.fatal = dup
		w.mu.Unlock()
		w.log.Error("another process took this worker's instance id; no longer claiming", "key", alive)
		return dup
	}
	if err != nil {
		return err
	}
	return w.advertise(ctx)
}

// unregister removes the guard, the advertisement and the index entry.
// FlowFabric leaves them to expire; removing them frees the instance id at
// once and keeps the unblock scanner from counting a gone worker's
// capabilities.
func (w *Worker) unregister(ctx context.Context) error {
	vk := w.c.vk
	res := vk.DoMulti(ctx,
		vk.B().Srem().Key(keys.WorkersIndex(w.ns)).Member(w.opts.InstanceID).Build(),
		vk.B().Del().Key(keys.WorkerCaps(w.ns, w.opts.InstanceID)).Build(),
		vk.B().Del().Key(keys.WorkerAlive(w.ns, w.opts.InstanceID)).Build(),
	)
	for _, r := range res {
		if err := r.Error(); err != nil {
			return fmt.Errorf("worker: unregister: %w", err)
		}
	}
	w.log.Info("worker closed")
	return nil
}
