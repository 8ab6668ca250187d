// Package depresolve resolves FlowFabric dependency edges: the push path
// that releases (or skips) the children of a finished flow member, and the
// repair of one blocked child that the dependency reconciler runs. Both the
// host's completion listener and the dependency-reconciler plugin use it,
// so the two paths cannot drift apart.
//
// A Resolver runs over an Executor, which batches commands; a plugin's
// scannerapi.Host is one, and the host's depexec.LibraryExecutor adapts its
// flowfabric library for in-process callers. Every batch is one pipelined
// round trip: resolving a level of the DAG costs a fixed number of round
// trips whatever the number of edges.
//
// Differences from FlowFabric's cascade (reference scanners.md 11.3, 8.3,
// pitfalls P7, P15, P19), all deliberate:
//   - the upstream's outcome is read from its core and must be terminal
//     (lifecycle terminal, outcome set); a replayed, running upstream is
//     left alone instead of being resolved with outcome "none";
//   - now_ms is the server's clock (TIME), never the local one;
//   - replies are classified by status: satisfied, impossible,
//     already_resolved, pending and already_fired are all resolutions;
//     Lua error codes and failed commands are counted by class and code,
//     never swallowed;
//   - a read that fails skips only the items that depended on it, for this
//     call; nothing is cached across calls (an upstream whose read failed
//     is not remembered as "not terminal");
//   - the lane of a child comes from its core; a failed read is never
//     replaced by "default";
//   - every unresolved edge of a reconciled child is examined, not the
//     first 20;
//   - flow keys are built on the member's own partition (members live in
//     their flow's partition), so no FCALL ever spans two slots.
//
// The files follow the calls: cascade.go (Cascade: a completion's outgoing
// edges, level by level), reconcile.go (ReconcileChildren: the repair of
// blocked children), resolve.go (the FCALLs and their replies), reads.go
// (the cores and replies both read), result.go (what a call did) and
// completion.go (the completion message).
package depresolve

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Commands and Functions are what a Resolver sends. A scanner that uses it
// declares them in its scannerapi.Info (Commands, Functions) so the host
// lets them through. Each call returns a new slice, the caller's to keep.
func Commands() []string { return slices.Clone(commands) }

// Functions: see Commands.
func Functions() []string { return slices.Clone(functions) }

var (
	commands  = []string{"TIME", "HGET", "HMGET", "SMEMBERS"}
	functions = []string{"ff_resolve_dependency", "ff_promote_blocked_to_eligible"}
)

// Executor runs commands pipelined and returns one reply per command, in
// order. A failed command is a Reply with Err set; an error means the whole
// batch could not run. scannerapi.Host satisfies it.
type Executor interface {
	Exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error)
}

// DefaultMaxDepth is how many levels of skipped children a cascade follows
// below the finished execution (FlowFabric's limit).
const DefaultMaxDepth = 50

// DefaultMaxBatch bounds the commands sent in one Exec; larger batches are
// split (the host refuses batches over 10000 commands).
const DefaultMaxBatch = 1000

// ErrData classifies data that cannot be acted on: unparsable ids, an
// edge whose record is missing, a child outside the completion's flow.
const ErrData scannerapi.ErrorClass = "data"

// Options tune a Resolver. The zero value is usable.
type Options struct {
	// MaxDepth is how many levels of skipped children a cascade follows;
	// deeper ones are reported in Result.Left for the dependency
	// reconciler. Default DefaultMaxDepth.
	MaxDepth int
	// MaxBatch bounds one Exec. Default DefaultMaxBatch.
	MaxBatch int
	// Logger receives warnings (depth limit reached). Default: none.
	Logger hclog.Logger
}

// Resolver resolves dependency edges through an Executor. It holds no
// state between calls and is safe for concurrent use.
type Resolver struct {
	ex       Executor
	maxDepth int
	maxBatch int
	log      hclog.Logger
}

// New returns a Resolver running its commands on ex.
func New(ex Executor, opts Options) *Resolver {
	r := &Resolver{ex: ex, maxDepth: opts.MaxDepth, maxBatch: opts.MaxBatch, log: opts.Logger}
	if r.maxDepth <= 0 {
		r.maxDepth = DefaultMaxDepth
	}
	if r.maxBatch <= 0 {
		r.maxBatch = DefaultMaxBatch
	}
	if r.log == nil {
		r.log = hclog.NewNullLogger()
	}
	return r
}

// exec runs cmds in batches of at most maxBatch and checks the reply count.
func (r *Resolver) exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	out := make([]scannerapi.Reply, 0, len(cmds))
	for start := 0; start < len(cmds); start += r.maxBatch {
		chunk := cmds[start:min(start+r.maxBatch, len(cmds))]
		reps, err := r.ex.Exec(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("depresolve: exec %d commands: %w", len(chunk), err)
		}
		if len(reps) != len(chunk) {
			return nil, fmt.Errorf("depresolve: exec answered %d replies to %d commands", len(reps), len(chunk))
		}
		out = append(out, reps...)
	}
	return out, nil
}
