package client

import (
	"context"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// UpdateProgress records how far the task has come on its execution
// (progress_pct, 0..100, and an optional message) through
// ff_update_progress, fenced by the task's lease id and epoch. An empty
// message leaves the stored one as it is. A lease that was revoked or
// has expired, or that is no longer this task's, is refused
// (ErrLeaseRevoked, ErrLeaseExpired, ErrStaleLease) and nothing is
// written; after Complete, Fail or Cancel it answers ErrTaskFinished.
func (t *Task) UpdateProgress(ctx context.Context, pct int, message string) error {
	if t.isFinished() {
		return ErrTaskFinished
	}
	if pct < 0 || pct > 100 {
		return invalid("pct", "%d is outside 0..100", pct)
	}
	if err := validateText("message", message, false, t.w.c.limits.MaxReasonBytes); err != nil {
		return err
	}
	_, err := t.w.c.call(ctx, lua.Call{
		Function: "ff_update_progress",
		Keys:     []string{keys.Exec(t.id).Core()},
		Args:     []string{t.id.String(), t.leaseID, t.epoch, strconv.Itoa(pct), message},
	})
	return err
}
