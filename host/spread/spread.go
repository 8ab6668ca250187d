// Package spread runs a batch of commands across a Valkey Cluster so that
// a master that fails holds up only its own commands.
//
// valkey-go's DoMulti on a cluster sends each node its share and returns
// when every node has answered; when one master dies, the client retries
// its share until the failover completes, and the healthy nodes' answers
// wait as long (seconds; with Valkey's default node timeout, 15-20 s). A
// scanner cycle that reads every partition at once would stall everywhere.
package spread

import (
	"context"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
)

// StragglerWait is how long a batch waits for the partitions of a
// node that has not answered once the others have: a healthy node answers
// a cycle's reads in milliseconds, a failing one makes the client retry
// until its failover completes (seconds). Past the wait, those partitions'
// reads fail with the context's error (class transport) and count as
// failed partitions of this cycle; they are read again next cycle. The
// wait grows with the time the first answer took, so that a server that
// is merely slow everywhere is not cut short.
const StragglerWait = time.Second

// Chunk bounds the commands of one pipeline on a single server, so a
// large batch does not build one huge pipeline.
const Chunk = 1024

// DoMulti runs cmds and returns their results in order; clk times the
// stragglers. group[i] names
// the group of command i: commands of one group share a slot (a
// partition's keys). On a single server the commands go out in pipelined
// chunks. On a cluster each group goes out as a pipeline of its own, all
// at once (the client still batches them per connection), and groups
// still unanswered StragglerWait after the first one answered are given
// up.
func DoMulti(ctx context.Context, clk clock.Clock, client valkey.Client, cmds valkey.Commands, group []int) []valkey.ValkeyResult {
	if client.Mode() != valkey.ClientModeCluster || len(cmds) == 0 {
		results := make([]valkey.ValkeyResult, 0, len(cmds))
		for i := 0; i < len(cmds); i += Chunk {
			results = append(results, client.DoMulti(ctx, cmds[i:min(i+Chunk, len(cmds))]...)...)
		}
		return results
	}
	groups := map[int][]int{}
	var order []int
	for i, p := range group {
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], i)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]valkey.ValkeyResult, len(cmds))
	done := make(chan struct{}, len(order))
	var wg sync.WaitGroup
	start := clk.Now()
	for _, p := range order {
		idx := groups[p]
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make(valkey.Commands, len(idx))
			for j, i := range idx {
				mine[j] = cmds[i]
			}
			for j, res := range client.DoMulti(ctx, mine...) {
				results[idx[j]] = res
			}
			done <- struct{}{}
		}()
	}
	<-done
	if len(order) > 1 {
		wait := max(StragglerWait, 4*clock.Since(clk, start))
		timer := clk.NewTimer(wait)
	collect:
		for n := 1; n < len(order); n++ {
			select {
			case <-done:
			case <-timer.C():
				cancel()
				break collect
			}
		}
		timer.Stop()
	}
	wg.Wait()
	return results
}
