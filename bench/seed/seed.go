// Package seed plants benchmark state with the library's own functions, so
// what the scanners meet is exactly what producers and workers would have
// left: ff_create_execution, ff_issue_claim_grant and ff_claim_execution,
// pipelined in large batches from a few goroutines. Nothing is written
// behind the library's back.
//
// Seeding is split in two steps so a benchmark can time the moment leases
// start: Prepare creates executions and grants them (they are eligible and
// granted, not yet leased), Claim claims them with a lease of a chosen TTL
// in one tight pipelined wave.
package seed

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// Defaults.
const (
	DefaultLane      = "default"
	DefaultNamespace = "bench"
	DefaultWorkerID  = "bench-worker"
	DefaultInstance  = "bench-wi"
	// DefaultChunk is how many executions one pipeline carries (each
	// execution is two or three FCALLs).
	DefaultChunk = 500
	// DefaultWorkers is how many pipelines are in flight at once.
	DefaultWorkers = 4
	// grantTTL keeps grants valid between Prepare and Claim.
	grantTTL = 10 * time.Minute
)

// Seeder plants executions and leases.
type Seeder struct {
	Lib        *lua.Library
	Partitions keys.PartitionConfig
	Lane       string
	Namespace  string
	Chunk      int
	Workers    int
}

// New returns a seeder with defaults for the library's client.
func New(lib *lua.Library, parts keys.PartitionConfig) *Seeder {
	return &Seeder{Lib: lib, Partitions: parts, Lane: DefaultLane, Namespace: DefaultNamespace,
		Chunk: DefaultChunk, Workers: DefaultWorkers}
}

// Client is the seeder's valkey client.
func (s *Seeder) Client() valkey.Client { return s.Lib.Client() }

// IDs returns n fresh execution ids spread round-robin over the flow
// partitions (id i lands in partition i mod count).
func (s *Seeder) IDs(n int) []keys.ExecutionID {
	parts := s.Partitions.Partitions(keys.FamilyFlow)
	ids := make([]keys.ExecutionID, n)
	for i := range ids {
		id, err := keys.ExecutionIDIn(parts[i%len(parts)], keys.NewUUID())
		if err != nil {
			panic(err) // partitions come from the config: cannot be out of range
		}
		ids[i] = id
	}
	return ids
}

// Prepare creates the executions and issues each a claim grant (valid for
// ten minutes), so Claim needs one FCALL per lease.
func (s *Seeder) Prepare(ctx context.Context, ids []keys.ExecutionID) error {
	return s.each(ctx, ids, func(_ int, id keys.ExecutionID) []lua.Call {
		return []lua.Call{s.createCall(id), s.grantCall(id)}
	})
}

// Claim claims every execution (granted by Prepare) with a lease of
// ttl(i) for ids[i]. The lease's expiry is the server's clock at the claim
// plus the TTL.
func (s *Seeder) Claim(ctx context.Context, ids []keys.ExecutionID, ttl func(i int) time.Duration) error {
	return s.each(ctx, ids, func(i int, id keys.ExecutionID) []lua.Call {
		return []lua.Call{s.claimCall(id, ttl(i), 0)}
	})
}

// ClaimTimed claims prepared executions with a lease of ttl and an attempt
// timeout of timeout(i) each: the claim puts execution i into its
// partition's attempt_timeout index, due timeout(i) after the claim.
func (s *Seeder) ClaimTimed(ctx context.Context, ids []keys.ExecutionID, ttl time.Duration, timeout func(i int) time.Duration) error {
	return s.each(ctx, ids, func(i int, id keys.ExecutionID) []lua.Call {
		return []lua.Call{s.claimCall(id, ttl, max(timeout(i).Milliseconds(), 1))}
	})
}

// Leases is Prepare then Claim with the same TTL for all: with a TTL of a
// millisecond the leases are expired as soon as the call returns.
func (s *Seeder) Leases(ctx context.Context, n int, ttl time.Duration) ([]keys.ExecutionID, error) {
	ids := s.IDs(n)
	if err := s.Prepare(ctx, ids); err != nil {
		return nil, err
	}
	if err := s.Claim(ctx, ids, func(int) time.Duration { return ttl }); err != nil {
		return nil, err
	}
	return ids, nil
}

// each runs the calls of every id, chunked into pipelines with up to
// Workers in flight, and fails on the first reply that is not a success.
// The calls of one id stay in order inside one pipeline.
func (s *Seeder) each(ctx context.Context, ids []keys.ExecutionID, calls func(i int, id keys.ExecutionID) []lua.Call) error {
	chunk, workers := max(s.Chunk, 1), max(s.Workers, 1)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	fail := func(err error) { once.Do(func() { first = err }) }
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := range next {
				end := min(start+chunk, len(ids))
				var batch []lua.Call
				for i := start; i < end; i++ {
					batch = append(batch, calls(i, ids[i])...)
				}
				for j, r := range s.Lib.DoMulti(ctx, batch...) {
					if err := success(r); err != nil {
						fail(fmt.Errorf("seed: %s: %w", batch[j].Function, err))
						break
					}
				}
			}
		}()
	}
	for start := 0; start < len(ids); start += chunk {
		select {
		case next <- start:
		case <-ctx.Done():
			fail(ctx.Err())
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return first
}

// success checks a library reply {1, status, ...}.
func success(r valkey.ValkeyResult) error {
	arr, err := r.ToArray()
	if err != nil {
		return err
	}
	if len(arr) < 2 {
		return fmt.Errorf("reply of %d elements", len(arr))
	}
	flag, err := arr[0].AsInt64()
	if err != nil {
		return err
	}
	if flag != 1 {
		code, _ := arr[1].ToString()
		return fmt.Errorf("library error %q", code)
	}
	return nil
}

// createCall builds ff_create_execution for a plain solo execution.
func (s *Seeder) createCall(id keys.ExecutionID) lua.Call {
	k, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	return lua.Call{
		Function: "ff_create_execution",
		Keys: []string{k.Core(), k.Payload(), k.Policy(), k.Tags(), pk.LaneEligible(s.Lane), pk.Noop(),
			pk.ExecutionDeadline(), pk.AllExecutions()},
		Args: []string{id.String(), s.Namespace, s.Lane, "bench", "0", "ffbench", "", "", "", "", "", "",
			strconv.Itoa(int(id.Partition().Index))},
	}
}

func (s *Seeder) grantCall(id keys.ExecutionID) lua.Call {
	k, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	return lua.Call{
		Function: "ff_issue_claim_grant",
		Keys:     []string{k.Core(), k.ClaimGrant(), pk.LaneEligible(s.Lane)},
		Args: []string{id.String(), DefaultWorkerID, DefaultInstance, s.Lane, "",
			strconv.FormatInt(grantTTL.Milliseconds(), 10), "", "", ""},
	}
}

// claimCall builds ff_claim_execution of attempt 0 with a lease of ttl and
// an attempt timeout of timeoutMs (0: none).
func (s *Seeder) claimCall(id keys.ExecutionID, ttl time.Duration, timeoutMs int64) lua.Call {
	k, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	timeout := ""
	if timeoutMs > 0 {
		timeout = strconv.FormatInt(timeoutMs, 10)
	}
	return lua.Call{
		Function: "ff_claim_execution",
		Keys: []string{k.Core(), k.ClaimGrant(), pk.LaneEligible(s.Lane), pk.LeaseExpiry(),
			pk.WorkerLeases(DefaultInstance), k.Attempt(0), k.AttemptUsage(0), k.AttemptPolicy(0), k.Attempts(),
			k.LeaseCurrent(), k.LeaseHistory(), pk.LaneActive(s.Lane), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{id.String(), DefaultWorkerID, DefaultInstance, s.Lane, "", keys.NewUUID().String(),
			strconv.FormatInt(max(ttl.Milliseconds(), 1), 10), strconv.FormatInt(max(ttl.Milliseconds(), 1)*2/3, 10),
			keys.NewUUID().String(), "", timeout, ""},
	}
}

// Fields reads fields of the cores of ids, pipelined: out[i][j] is field j
// of ids[i] ("" when absent).
func Fields(ctx context.Context, client valkey.Client, ids []keys.ExecutionID, fields ...string) ([][]string, error) {
	out := make([][]string, len(ids))
	const chunk = 2000
	for start := 0; start < len(ids); start += chunk {
		end := min(start+chunk, len(ids))
		cmds := make(valkey.Commands, 0, end-start)
		for _, id := range ids[start:end] {
			cmds = append(cmds, client.B().Hmget().Key(keys.Exec(id).Core()).Field(fields...).Build())
		}
		for j, r := range client.DoMulti(ctx, cmds...) {
			arr, err := r.ToArray()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", ids[start+j], err)
			}
			vals := make([]string, len(arr))
			for k := range arr {
				vals[k], _ = arr[k].ToString() // nil stays ""
			}
			out[start+j] = vals
		}
	}
	return out, nil
}

// Snapshot saves the dataset (library included) to the server's RDB file,
// so Restore can bring back exactly this state.
func Snapshot(ctx context.Context, client valkey.Client) error {
	return client.Do(ctx, client.B().Save().Build()).Error()
}

// Restore replaces the dataset with the last Snapshot (DEBUG RELOAD
// NOSAVE: flush, then load the RDB). The server must allow DEBUG
// (enable-debug-command local or yes).
func Restore(ctx context.Context, client valkey.Client) error {
	return client.Do(ctx, client.B().Arbitrary("DEBUG", "RELOAD", "NOSAVE").Build()).Error()
}
