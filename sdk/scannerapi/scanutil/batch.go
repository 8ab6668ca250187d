package scanutil

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Batch is one Exec's worth of commands, in groups: each group is the
// commands of one step (an item's FCALL, its filter reads, a page read)
// with the handler that reads their replies. It saves every scanner the
// index arithmetic of matching replies back to what asked for them.
type Batch struct {
	cmds   []scannerapi.Command
	groups []group
}

type group struct {
	n      int
	handle func([]scannerapi.Reply)
}

// Add appends cmds as one group; handle (nil: replies not needed) is
// called with their replies, in order, once the batch has run.
func (b *Batch) Add(handle func(replies []scannerapi.Reply), cmds ...scannerapi.Command) {
	if len(cmds) == 0 {
		return
	}
	b.cmds = append(b.cmds, cmds...)
	b.groups = append(b.groups, group{n: len(cmds), handle: handle})
}

// Len returns the number of commands in the batch.
func (b *Batch) Len() int { return len(b.cmds) }

// Groups returns the number of groups in the batch (for accounting what
// a failed batch carried).
func (b *Batch) Groups() int { return len(b.groups) }

// Commands returns the batch's commands, in order.
func (b *Batch) Commands() []scannerapi.Command { return b.cmds }

// Exec sends the batch in one host.Exec and calls the groups' handlers in
// the order they were added. When Exec fails (or answers a wrong number of
// replies) no handler runs and the error is returned: the outcome of every
// command in the batch is unknown.
func (b *Batch) Exec(ctx context.Context, host scannerapi.Host) error {
	if len(b.cmds) == 0 {
		return nil
	}
	return b.dispatch(host.Exec(ctx, b.cmds))
}

// ExecChunked is Exec for batches that may exceed what one callback should
// carry: the commands go in Execs of at most chunk commands
// (scannerapi.ExecChunked). An error means the first chunk could not run;
// a later chunk that fails shows as failed replies of its commands.
func (b *Batch) ExecChunked(ctx context.Context, host scannerapi.Host, chunk int) error {
	if len(b.cmds) == 0 {
		return nil
	}
	return b.dispatch(scannerapi.ExecChunked(ctx, host, b.cmds, chunk))
}

func (b *Batch) dispatch(replies []scannerapi.Reply, err error) error {
	if err != nil {
		return err
	}
	if len(replies) != len(b.cmds) {
		return fmt.Errorf("host answered %d replies to %d commands", len(replies), len(b.cmds))
	}
	i := 0
	for _, g := range b.groups {
		if g.handle != nil {
			g.handle(replies[i : i+g.n])
		}
		i += g.n
	}
	return nil
}

// Waves runs a scan as a series of batches ("waves"): build fills a fresh
// batch from the scan's queues, the batch runs, its handlers fill the
// queues for the next wave, until build adds nothing. A wave goes in one
// Exec when chunk <= 0, else in Execs of at most chunk commands
// (ExecChunked). It returns the number of waves that ran (their handlers
// did their work) and the error of the wave that failed, if one did;
// nothing runs after it.
func Waves(ctx context.Context, host scannerapi.Host, chunk int, build func(*Batch)) (int, error) {
	for n := 0; ; n++ {
		var b Batch
		build(&b)
		if b.Len() == 0 {
			return n, nil
		}
		var err error
		if chunk > 0 {
			err = b.ExecChunked(ctx, host, chunk)
		} else {
			err = b.Exec(ctx, host)
		}
		if err != nil {
			return n, fmt.Errorf("wave %d: %w", n+1, err)
		}
	}
}
