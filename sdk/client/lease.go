package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// renewLoop renews the lease when 2/3 of its TTL has passed (the
// library's own renewal deadline), from the time the claim or last renewal
// was sent, so clock reads never make the lease look longer than it is. A
// refused renewal ends the lease at once; a failed one (transport) is
// retried at short intervals until the local estimate of the expiry, and
// only then reported as lost.
func (t *Task) renewLoop(acquired time.Time) {
	defer close(t.renewEnd)
	ttl := t.w.opts.LeaseTTL
	retry := max(ttl/10, 10*time.Millisecond)
	next := acquired.Add(ttl * 2 / 3)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-t.renewOff:
			return
		case <-timer.C:
		}
		sent := time.Now()
		expires := t.LeaseExpiresAt()
		ctx, cancel := context.WithDeadline(context.Background(), expires)
		err := t.renew(ctx)
		cancel()
		var se *ScriptError
		switch {
		case err == nil:
			t.mu.Lock()
			t.expires = sent.Add(ttl)
			t.mu.Unlock()
			timer.Reset(time.Until(sent.Add(ttl * 2 / 3)))
		case errors.As(err, &se):
			t.loseLease(err)
			return
		case !time.Now().Before(expires):
			t.loseLease(fmt.Errorf("renewals failed until the lease ran out: %w", err))
			return
		default:
			t.w.log.Warn("lease renewal failed; retrying", "execution_id", t.id, "error", err)
			timer.Reset(min(retry, time.Until(expires)))
		}
	}
}

// loseLease surfaces a lost lease to the handler through its context. The
// task stays unfinished: the handler still has to end it (its Complete will
// fail with the library's verdict) or Abandon it.
func (t *Task) loseLease(err error) {
	lost := &LeaseLostError{ExecutionID: t.id, Err: err}
	t.w.log.Warn("lease lost", "execution_id", t.id, "error", err)
	t.cancel(lost)
}

// renew is one ff_renew_lease: KEYS (4) core, lease_current,
// lease_history, lease_expiry; ARGV (7) eid, attempt_index, attempt_id,
// lease_id, epoch, ttl_ms, grace_ms.
func (t *Task) renew(ctx context.Context) error {
	ek, pk := keys.Exec(t.id), keys.FlowPart(t.id.Partition())
	_, err := t.w.c.call(ctx, lua.Call{
		Function: "ff_renew_lease",
		Keys:     []string{ek.Core(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LeaseExpiry()},
		Args: []string{t.id.String(), strconv.FormatUint(uint64(t.attemptIndex), 10), t.attemptID, t.leaseID, t.epoch,
			strconv.FormatInt(t.w.opts.LeaseTTL.Milliseconds(), 10), strconv.FormatInt(t.w.opts.RenewGrace.Milliseconds(), 10)},
	})
	return err
}
