package scannertest

import (
	"context"
	"sync"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Counter wraps Callbacks and counts what a scanner sends: Exec batches
// (callbacks, the costly round trips) and FCALLs among their commands.
// Scanner tests use it to pin their cost, e.g. "one callback per
// partition" or "no FCALL for an entry already handled".
type Counter struct {
	inner  pluginhost.Callbacks
	mu     sync.Mutex
	execs  int
	fcalls int
}

// NewCounter counts the traffic to inner.
func NewCounter(inner pluginhost.Callbacks) *Counter { return &Counter{inner: inner} }

// Exec counts the batch and passes it on.
func (c *Counter) Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	c.mu.Lock()
	c.execs++
	for _, cmd := range cmds {
		if len(cmd) > 0 && cmd[0] == "FCALL" {
			c.fcalls++
		}
	}
	c.mu.Unlock()
	return c.inner.Exec(ctx, scanner, cmds)
}

// Reset returns the batches and FCALLs counted since the last Reset and
// starts counting from zero.
func (c *Counter) Reset() (execs, fcalls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	execs, fcalls = c.execs, c.fcalls
	c.execs, c.fcalls = 0, 0
	return execs, fcalls
}
