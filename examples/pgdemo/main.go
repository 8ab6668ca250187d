// Command pgdemo is the workload `make run BACKEND=postgres` drives against
// a throwaway PostgreSQL holding FlowFabric's schema, so every Postgres
// reconciler has something to do. It writes rows with the columns and
// values FlowFabric's Postgres backend leaves (postgres.md §3 and §7),
// standing in for its producers and workers. Executions, flows and
// budgets go to random partitions (the reconcilers never recompute a
// partition from an id); worker registrations to FlowFabric's (FNV-1a of
// the instance id, mod 256):
//
//   - executions are created and claimed by workers; most complete, some
//     workers "crash" (the lease lapses), so pg_attempt_timeout retries them
//     (a worker claims the retry) and ends those that run out of retries;
//   - a chain flow a -> b -> c is created every few seconds and each step
//     completes as soon as it is released: the host's completion listener
//     advances the chain; an any_of race cancels the slow sibling through
//     pg_edge_cancel_dispatcher;
//   - delayed executions (pg_delayed_promoter), executions past their
//     deadline (pg_execution_deadline), suspensions that time out
//     (pg_suspension_timeout), pending waitpoints nobody uses
//     (pg_pending_wp_expiry), budgets with a short reset interval
//     (pg_budget_reset) and workers that stop heartbeating
//     (pg_worker_registry_ttl_sweep).
//
// It prints a one-line summary every few seconds and stops on SIGINT or
// SIGTERM or after -duration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	dsn := flag.String("dsn", "", "the database (FlowFabric's schema, e.g. from `ffscan postgres create-schema`)")
	duration := flag.Duration("duration", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "pgdemo: -dsn is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgdemo:", err)
		os.Exit(1)
	}
	defer pool.Close()
	d := &demo{pool: pool}
	if err := d.run(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(os.Stderr, "pgdemo:", err)
		os.Exit(1)
	}
}

type demo struct {
	pool                                                    *pgxpool.Pool
	created, completed, crashed, chains, delayed, suspended atomic.Int64
}

// Every step's SQL, as FlowFabric's backend writes these rows. $1 is the
// partition, $2 the execution id.
const (
	createSQL = `INSERT INTO ff_exec_core (partition_key, execution_id, flow_id, lane_id, lifecycle_phase, ownership_state,
		eligibility_state, public_state, attempt_state, created_at_ms, policy, raw_fields, deadline_at_ms)
		VALUES ($1, $2, $3, 'default', 'runnable', 'unowned', $4, 'waiting', 'pending', ffscan.now_ms(),
		'{"retry_policy": {"max_retries": 1}}', '{"namespace": "demo"}', $5)`
	claimSQL = `WITH e AS (UPDATE ff_exec_core SET lifecycle_phase = 'active', ownership_state = 'leased',
		eligibility_state = 'not_applicable', public_state = 'running', attempt_state = 'running_attempt'
		WHERE partition_key = $1 AND execution_id = $2 AND lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'
		RETURNING attempt_index)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_epoch,
		lease_expires_at_ms, started_at_ms) SELECT $1, $2, attempt_index, 'demo-worker', 'demo-worker-1', 1, ffscan.now_ms() + $3, ffscan.now_ms() FROM e
		ON CONFLICT (partition_key, execution_id, attempt_index) DO UPDATE SET lease_epoch = ff_attempt.lease_epoch + 1,
		lease_expires_at_ms = excluded.lease_expires_at_ms, worker_instance_id = excluded.worker_instance_id, outcome = NULL
		RETURNING attempt_index`
	completeSQL = `WITH e AS (UPDATE ff_exec_core SET lifecycle_phase = 'terminal', ownership_state = 'unowned',
		eligibility_state = 'not_applicable', public_state = 'completed', attempt_state = 'attempt_terminal', terminal_at_ms = ffscan.now_ms()
		WHERE partition_key = $1 AND execution_id = $2 AND lifecycle_phase = 'active' RETURNING flow_id),
		a AS (UPDATE ff_attempt SET outcome = 'success', lease_expires_at_ms = NULL, terminal_at_ms = ffscan.now_ms()
		WHERE partition_key = $1 AND execution_id = $2 AND lease_expires_at_ms IS NOT NULL)
		INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, occurred_at_ms)
		SELECT $1, $2, flow_id, 'success', 'demo', ffscan.now_ms() FROM e`
)

func (d *demo) exec(ctx context.Context, sql string, args ...any) error {
	_, err := d.pool.Exec(ctx, sql, args...)
	return err
}

// create makes an execution on a random partition; delayMs > 0 makes it a
// delayed one (attempt::delay keeps the time in deadline_at_ms).
func (d *demo) create(ctx context.Context, flow any, delayMs int64) (int16, string, error) {
	pk := int16(rand.IntN(256))
	id := newUUID()
	eligibility, deadline := "eligible_now", any(nil)
	if delayMs > 0 {
		eligibility = "not_eligible_until_time"
		var now int64
		if err := d.pool.QueryRow(ctx, "SELECT ffscan.now_ms()").Scan(&now); err != nil {
			return 0, "", err
		}
		deadline = now + delayMs
	}
	d.created.Add(1)
	return pk, id, d.exec(ctx, createSQL, pk, id, flow, eligibility, deadline)
}

// work claims an execution with a 1 s lease and, unless crash, completes
// it shortly after; a crash walks away and lets the lease lapse.
func (d *demo) work(ctx context.Context, pk int16, id string, crash bool) error {
	var att int
	if err := d.pool.QueryRow(ctx, claimSQL, pk, id, 1000).Scan(&att); err != nil {
		return nil // not claimable (yet, or any more): not an error of the demo
	}
	if crash {
		d.crashed.Add(1)
		return nil
	}
	time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
	d.completed.Add(1)
	return d.exec(ctx, completeSQL, pk, id)
}

func (d *demo) run(ctx context.Context) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	report := time.NewTicker(5 * time.Second)
	defer report.Stop()
	var n int
	var retries []func() error
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-report.C:
			fmt.Printf("pgdemo: %d created, %d completed, %d crashed, %d chains, %d delayed, %d suspended\n",
				d.created.Load(), d.completed.Load(), d.crashed.Load(), d.chains.Load(), d.delayed.Load(), d.suspended.Load())
			continue
		case <-tick.C:
		}
		n++
		// Claims of executions pg_attempt_timeout made runnable again.
		for _, r := range retries {
			if err := r(); err != nil {
				return err
			}
		}
		retries = retries[:0]
		pk, id, err := d.create(ctx, nil, 0)
		if err != nil {
			return err
		}
		crash := rand.IntN(4) == 0
		if err := d.work(ctx, pk, id, crash); err != nil {
			return err
		}
		if crash {
			// Retry it later (if the reconciler made it runnable again),
			// crashing once more now and then so some run out of retries.
			retries = append(retries, d.later(ctx, pk, id, rand.IntN(2) == 0))
		}
		steps := []struct {
			every int
			fn    func(context.Context) error
		}{
			{10, d.chain}, {15, d.race}, {10, d.delay}, {10, d.deadline}, {10, d.suspend}, {15, d.waitpoint},
			{25, d.budget}, {25, d.worker},
		}
		for _, s := range steps {
			if n%s.every == 0 {
				if err := s.fn(ctx); err != nil {
					return err
				}
			}
		}
	}
}

// later claims id again after its lease lapsed and the reconciler decided.
func (d *demo) later(ctx context.Context, pk int16, id string, crash bool) func() error {
	at := time.Now().Add(3 * time.Second)
	return func() error {
		if time.Now().Before(at) {
			return nil
		}
		return d.work(ctx, pk, id, crash)
	}
}

// chain creates a flow a -> b -> c on one partition and runs each step as
// soon as it is released (the completion listener releases them).
func (d *demo) chain(ctx context.Context) error {
	pk := int16(rand.IntN(256))
	flow := newUUID()
	ids := []string{newUUID(), newUUID(), newUUID()}
	for i, id := range ids {
		eligibility := "eligible_now"
		if i > 0 {
			eligibility = "blocked_by_dependencies"
		}
		if err := d.exec(ctx, createSQL, pk, id, flow, eligibility, nil); err != nil {
			return err
		}
		d.created.Add(1)
	}
	if err := d.exec(ctx, `INSERT INTO ff_flow_core (partition_key, flow_id, public_flow_state, created_at_ms) VALUES ($1, $2, 'open', ffscan.now_ms())`, pk, flow); err != nil {
		return err
	}
	for i := 0; i+1 < len(ids); i++ {
		if err := d.edge(ctx, pk, flow, ids[i], ids[i+1], `{"kind": "all_of"}`); err != nil {
			return err
		}
	}
	d.chains.Add(1)
	go func() {
		for _, id := range ids {
			for try := 0; try < 100 && ctx.Err() == nil; try++ {
				var ok bool
				_ = d.pool.QueryRow(ctx, "SELECT eligibility_state = 'eligible_now' FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2", pk, id).Scan(&ok)
				if ok {
					_ = d.work(ctx, pk, id, false)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	return nil
}

// edge adds an applied edge and its group (running_count counts it).
func (d *demo) edge(ctx context.Context, pk int16, flow, up, down, policy string) error {
	if err := d.exec(ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy)
		VALUES ($1, $2, $3, $4, $5, '{"edge_state": "applied", "dependency_kind": "success_only"}')`, pk, flow, newUUID(), up, down); err != nil {
		return err
	}
	return d.exec(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, policy, running_count) VALUES ($1, $2, $3, $4, 1)
		ON CONFLICT (partition_key, flow_id, downstream_eid) DO UPDATE SET running_count = ff_edge_group.running_count + 1`, pk, flow, down, policy)
}

// race: two upstreams of an any_of group with cancel_remaining; the quick
// one completes, the slow one is cancelled by the edge-cancel dispatcher.
func (d *demo) race(ctx context.Context) error {
	pk := int16(rand.IntN(256))
	flow := newUUID()
	quick, slow, down := newUUID(), newUUID(), newUUID()
	for _, id := range []string{quick, slow} {
		if err := d.exec(ctx, createSQL, pk, id, flow, "eligible_now", nil); err != nil {
			return err
		}
	}
	if err := d.exec(ctx, createSQL, pk, down, flow, "blocked_by_dependencies", nil); err != nil {
		return err
	}
	d.created.Add(3)
	for _, up := range []string{quick, slow} {
		if err := d.edge(ctx, pk, flow, up, down, `{"kind": "any_of", "on_satisfied": "cancel_remaining"}`); err != nil {
			return err
		}
	}
	var att int
	if err := d.pool.QueryRow(ctx, claimSQL, pk, slow, 60000).Scan(&att); err != nil {
		return err
	}
	return d.work(ctx, pk, quick, false)
}

func (d *demo) delay(ctx context.Context) error {
	_, _, err := d.create(ctx, nil, 1000)
	d.delayed.Add(1)
	return err
}

// deadline: a running execution whose deadline passes in 1 s.
func (d *demo) deadline(ctx context.Context) error {
	pk, id, err := d.create(ctx, nil, 0)
	if err != nil {
		return err
	}
	var att int
	if err := d.pool.QueryRow(ctx, claimSQL, pk, id, 60000).Scan(&att); err != nil {
		return err
	}
	return d.exec(ctx, "UPDATE ff_exec_core SET deadline_at_ms = ffscan.now_ms() + 1000 WHERE partition_key = $1 AND execution_id = $2", pk, id)
}

// suspend: a suspension with a 1 s timeout; the behaviour alternates.
func (d *demo) suspend(ctx context.Context) error {
	pk, id, err := d.create(ctx, nil, 0)
	if err != nil {
		return err
	}
	if err := d.exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'suspended', ownership_state = 'released', public_state = 'suspended',
		eligibility_state = 'not_applicable' WHERE partition_key = $1 AND execution_id = $2`, pk, id); err != nil {
		return err
	}
	behaviour := []string{"fail", "expire", "cancel", "auto_resume_with_timeout_signal"}[rand.IntN(4)]
	d.suspended.Add(1)
	return d.exec(ctx, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms, timeout_at_ms,
		reason_code, condition, timeout_behavior) VALUES ($1, $2, $3, ffscan.now_ms(), ffscan.now_ms() + 1000, 'waiting_for_signal',
		'{"kind": "signal"}', $4)`, pk, id, newUUID(), behaviour)
}

// waitpoint: a pending waitpoint nobody uses, expiring in 1 s.
func (d *demo) waitpoint(ctx context.Context) error {
	pk, id, err := d.create(ctx, nil, 0)
	if err != nil {
		return err
	}
	return d.exec(ctx, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token, created_at_ms,
		expires_at_ms, waitpoint_key) VALUES ($1, $2, $3, 'kid-1', 'token', ffscan.now_ms(), ffscan.now_ms() + 1000, $4)`,
		pk, newUUID(), id, "approval-"+id[:8])
}

// budget: a budget with usage and a 3 s reset interval (32 budget
// partitions, as FlowFabric's default).
func (d *demo) budget(ctx context.Context) error {
	pk, id := int16(rand.IntN(32)), newUUID()
	if err := d.exec(ctx, `INSERT INTO ff_budget_policy (partition_key, budget_id, policy_json, created_at_ms, updated_at_ms, next_reset_at_ms)
		VALUES ($1, $2, '{"reset_interval_ms": 3000, "hard_limits": {"tokens": 1000}}', ffscan.now_ms(), ffscan.now_ms(), ffscan.now_ms() + 3000)`, pk, id); err != nil {
		return err
	}
	return d.exec(ctx, `INSERT INTO ff_budget_usage (partition_key, budget_id, dimensions_key, current_value, updated_at_ms)
		VALUES ($1, $2, 'tokens', $3, ffscan.now_ms())`, pk, id, rand.IntN(900))
}

// worker: a registration that stops heartbeating (TTL 2 s).
func (d *demo) worker(ctx context.Context) error {
	inst := "demo-worker-" + newUUID()[:8]
	return d.exec(ctx, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
		last_heartbeat_ms, liveness_ttl_ms, registered_at_ms) VALUES ($1, 'demo', $2, 'demo-worker', '{default}', '', ffscan.now_ms(), 2000, ffscan.now_ms())`,
		workerPartition(inst), inst)
}

// workerPartition is FlowFabric's worker-registry partition of an
// instance id: FNV-1a 64-bit, modulo 256.
func workerPartition(inst string) int16 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(inst)) // a hash.Hash never fails to write
	return int16(h.Sum64() % 256)
}

// newUUID is a random (version 4) uuid.
func newUUID() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
