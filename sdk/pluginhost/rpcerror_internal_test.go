package pluginhost

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lateTimer is a context whose deadline has passed while its timer has
// not fired yet, as in a process too busy to run its timers on time.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// The plugin's DeadlineExceeded can arrive before our own timer fires; it
// is still the caller's deadline, and says so (errors.Is), while the same
// status before the deadline is the plugin's own.
func TestDeadlineExceededBeforeOurTimerFires(t *testing.T) {
	p := &Plugin{path: "p", exitCtx: context.Background()}
	remote := status.Error(codes.DeadlineExceeded, "context deadline exceeded")

	late := lateTimer{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	err := p.rpcError(late, "s", "ScanPartition", remote)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	early := lateTimer{Context: context.Background(), deadline: time.Now().Add(time.Hour)}
	err = p.rpcError(early, "s", "ScanPartition", remote)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.Contains(t, err.Error(), "DeadlineExceeded")
}
