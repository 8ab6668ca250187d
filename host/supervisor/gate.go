package supervisor

import (
	"context"
	"fmt"
	"runtime"
)

// LaunchGate bounds how many plugin launches run at once across the
// supervisors that share it (a host shares one among all its scanners).
//
// Why: a launch is short bursts of CPU (the process's runtime start, the
// TLS handshake, Info), and a host starts all its scanners together. On a
// 2-core machine seventeen launches at once each get a seventeenth of the
// CPU, so every one of them runs several times longer than it would alone,
// and under outside load they ran past the start timeout together, were
// killed and retried together, and missed their cycles (issue 46). Through
// the gate each launch runs with the CPU a launch needs, the total start
// takes no longer (the same work, in a better order), and StartTimeout
// measures one launch, not the queue in front of it.
type LaunchGate struct {
	slots chan struct{}
}

// NewLaunchGate returns a gate for n launches at once; n <= 0 means one per
// CPU the Go runtime uses (at least two, so that one slow plugin does not
// hold every other scanner's start).
func NewLaunchGate(n int) *LaunchGate {
	if n <= 0 {
		n = max(2, runtime.GOMAXPROCS(0))
	}
	return &LaunchGate{slots: make(chan struct{}, n)}
}

// Size is how many launches may run at once.
func (g *LaunchGate) Size() int { return cap(g.slots) }

// acquire waits for a slot until ctx ends; release gives it back. A nil
// gate admits everything at once.
func (g *LaunchGate) acquire(ctx context.Context) (release func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a launch slot (%d launches run at once): %w", cap(g.slots), ctx.Err())
	}
}
