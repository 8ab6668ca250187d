package scannertest

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// WorldTimeout bounds a World's context: a scenario that needs longer is
// stuck, and its test should fail rather than wait for the go test timeout.
const WorldTimeout = 2 * time.Minute

// World is the state a test builds on a real server the way FlowFabric's
// producers and workers do: the flowfabric library loaded, an sdk/client
// on it, and a context the test's commands run under. A scenario builds
// its executions, flows and budgets through Client (or the library's own
// functions through Lib) instead of writing keys by hand, so the state is
// what production would have made.
//
// In a Case's Setup:
//
//	Setup: func(t testing.TB, vk valkey.Client) {
//		w := scannertest.NewWorld(t, vk, client.Options{Partitions: parts})
//		r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: "default", Kind: "k"})
//		...
//	},
//
// and in a test that builds its own requests, on a server of its own:
//
//	w := scannertest.StartWorld(t, client.Options{})
type World struct {
	T      testing.TB
	Ctx    context.Context // cancelled when the test ends, and after WorldTimeout
	Valkey valkey.Client
	Lib    *lua.Library
	Client *client.Client
}

// NewWorld loads the flowfabric library on vk (nothing is replaced when
// the same version is there) and opens an sdk/client with o on it; its
// Library is the world's. It fails the test when either fails.
func NewWorld(t testing.TB, vk valkey.Client, o client.Options) *World {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WorldTimeout)
	t.Cleanup(cancel)
	lib := lua.New(vk, lua.Options{})
	if _, err := lib.Ensure(ctx); err != nil {
		t.Fatalf("scannertest: load the flowfabric library: %v", err)
	}
	o.Library = lib
	c, err := client.New(ctx, vk, o)
	if err != nil {
		t.Fatalf("scannertest: client: %v", err)
	}
	return &World{T: t, Ctx: ctx, Valkey: vk, Lib: lib, Client: c}
}

// StartWorld is NewWorld on a server of the test's own (sdk/testserver),
// stopped when the test ends.
func StartWorld(t testing.TB, o client.Options) *World {
	t.Helper()
	return NewWorld(t, testserver.New(t).Client(t), o)
}

// Do runs one command and fails the test on an error reply; a nil reply
// is not an error.
func (w *World) Do(args ...string) valkey.ValkeyResult {
	w.T.Helper()
	r := w.Valkey.Do(w.Ctx, w.Valkey.B().Arbitrary(args...).Build())
	if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
		w.T.Fatalf("scannertest: %v: %v", args, err)
	}
	return r
}

// Worker registers a worker with o (its Close runs when the test ends,
// abandoning what it still holds, so the instance id is free at once).
func (w *World) Worker(o client.WorkerOptions) *client.Worker {
	w.T.Helper()
	wk, err := w.Client.NewWorker(w.Ctx, o)
	if err != nil {
		w.T.Fatalf("scannertest: worker: %v", err)
	}
	w.T.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = wk.Close(ctx)
	})
	return wk
}

// MaxClaimRounds bounds Claim: one ClaimNext looks at one chunk of
// partitions of one lane, so an eligible execution may take several
// rounds to meet; this many cover every lane and partition of a test's
// layout many times over.
const MaxClaimRounds = 64

// Claim returns the task wk claims next, failing the test when
// MaxClaimRounds of ClaimNext find nothing.
func (w *World) Claim(wk *client.Worker) *client.Task {
	w.T.Helper()
	for range MaxClaimRounds {
		task, err := wk.ClaimNext(w.Ctx)
		if err != nil {
			w.T.Fatalf("scannertest: claim: %v", err)
		}
		if task != nil {
			return task
		}
	}
	w.T.Fatalf("scannertest: nothing to claim in %d rounds", MaxClaimRounds)
	return nil
}

// NowMs is the server's clock in milliseconds (ServerNowMs).
func (w *World) NowMs() int64 {
	w.T.Helper()
	return ServerNowMs(w.T, w.Valkey)
}

// WaitPast returns once the server's clock is past ms. Scanners judge
// what is due by the server's clock (ScanRequest.NowMs is its TIME), so a
// scenario whose timer, window or lease is to run out waits for that
// clock, however loaded the machine, and no longer than it must.
func (w *World) WaitPast(ms int64) {
	w.T.Helper()
	for {
		now := w.NowMs()
		if now > ms {
			return
		}
		select {
		case <-w.Ctx.Done():
			w.T.Fatalf("scannertest: the server's clock did not pass %d: %v", ms, w.Ctx.Err())
		case <-time.After(time.Duration(ms-now+1) * time.Millisecond):
		}
	}
}
