package scannerapi

import (
	"context"
	"fmt"
)

// MaxExecBatch is the most commands one Host.Exec may carry; the host
// refuses larger batches so one scanner cannot monopolise a connection.
const MaxExecBatch = 10000

// ExecChunked runs cmds through host in batches of at most chunk commands
// (MaxExecBatch when chunk <= 0 or larger), returning one reply per command
// in order. If the first batch cannot run at all the error is returned, as
// from Exec; if a later one cannot, the earlier batches did run, so every
// command of the failed batch gets a transport-class error reply instead and
// each is accounted for by the caller's usual reply handling.
func ExecChunked(ctx context.Context, host Host, cmds []Command, chunk int) ([]Reply, error) {
	if chunk <= 0 || chunk > MaxExecBatch {
		chunk = MaxExecBatch
	}
	out := make([]Reply, 0, len(cmds))
	for start := 0; start < len(cmds); start += chunk {
		part := cmds[start:min(start+chunk, len(cmds))]
		replies, err := host.Exec(ctx, part)
		if err == nil && len(replies) != len(part) {
			err = fmt.Errorf("host answered %d replies to %d commands", len(replies), len(part))
		}
		if err != nil {
			if start == 0 {
				return nil, err
			}
			for range part {
				out = append(out, Reply{Kind: KindError, Err: err.Error(), ErrClass: ErrTransport})
			}
			continue
		}
		out = append(out, replies...)
	}
	return out, nil
}
