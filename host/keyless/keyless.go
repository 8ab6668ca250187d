// Package keyless sends the commands that name no key (TIME, PING) to a
// node that can answer them.
//
// On a cluster, valkey-go sends a keyless command over any connection it
// holds, and it keeps the configured seed address among them: once the
// seed node has died and its slots failed over, some TIME and PING calls
// still go to it and fail. Do routes them by a slot instead (whichever
// master serves it now) and, when that master does not answer promptly
// (it may be the one failing over), asks every node the client knows at
// once and takes the first answer.
package keyless

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/lua/topology"
)

// Anchor is the key whose slot carries keyless commands by default.
const Anchor = topology.Anchor

// FirstTry bounds the attempt through the anchor's master before every
// known node is asked: a healthy node answers TIME in well under a
// millisecond, a failing one makes the client retry until its deadline.
const FirstTry = 300 * time.Millisecond

// Do runs the command build returns (called once per attempt: a built
// command is consumed by the client). On a single server it is sent as it
// is.
func Do(ctx context.Context, client valkey.Client, build func(valkey.Builder) valkey.Completed) valkey.ValkeyResult {
	if client.Mode() != valkey.ClientModeCluster {
		return client.Do(ctx, build(client.B()))
	}
	first, cancel := context.WithTimeout(ctx, FirstTry)
	res := client.Do(first, build(client.B()).SetSlot(Anchor))
	cancel()
	if res.Error() == nil || ctx.Err() != nil || valkey.IsValkeyNil(res.Error()) {
		return res
	}
	var ve *valkey.ValkeyError
	if errors.As(res.Error(), &ve) && !transient(ve) {
		return res // the server answered: its refusal is the answer
	}
	return race(ctx, client, build, res)
}

// transient reports whether a server's error reply means "ask again
// elsewhere or later" rather than an answer.
func transient(ve *valkey.ValkeyError) bool {
	_, moved := ve.IsMoved()
	_, ask := ve.IsAsk()
	return moved || ask || ve.IsTryAgain() || ve.IsClusterDown() || ve.IsLoading()
}

// race sends the command to every node the client knows, at once, and
// returns the first success (or, when none succeeds, the first failure).
func race(ctx context.Context, client valkey.Client, build func(valkey.Builder) valkey.Completed, failed valkey.ValkeyResult) valkey.ValkeyResult {
	nodes := client.Nodes()
	if len(nodes) == 0 {
		return failed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan valkey.ValkeyResult, len(nodes))
	for _, n := range nodes {
		go func(n valkey.Client) { results <- n.Do(ctx, build(n.B())) }(n)
	}
	for range nodes {
		if r := <-results; r.Error() == nil {
			return r
		}
	}
	return failed
}

// Nodes lists the addresses of the connections the client holds, sorted.
// On a cluster that is the topology as the client last refreshed it plus
// the configured seeds, dead or alive (topology.Masters asks the cluster
// which masters serve slots); it changes when the client sees a failover
// or a reshard.
func Nodes(client valkey.Client) []string {
	var out []string
	for addr := range client.Nodes() {
		out = append(out, addr)
	}
	sort.Strings(out)
	return out
}
