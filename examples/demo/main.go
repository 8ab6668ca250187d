// Command demo is the small workload `make run` drives against a throwaway
// server so every ffscan scanner has something to do:
//
//   - producers enqueue solo executions on two lanes, some with retries;
//   - two workers run them, and now and then a task "crashes" (the worker
//     stops renewing and walks away), so its lease expires, lease_expiry
//     marks it and a worker reclaims it;
//   - every few seconds a diamond flow A->{B,C}->D is created (the
//     completion listener and dependency reconciler release D), and a flow
//     is cancelled with grace 0 for the cancel reconciler to drain;
//   - two budgets with a short reset interval get usage for budget_reset,
//     and after 10 s an "operator" lowers the hard limit of a third one,
//     which never resets, below its usage for the budget reconciler;
//   - every completed execution becomes a candidate for retention once the
//     demo config's short retention has passed;
//   - approval tasks suspend on a signal with a 2 s timeout: half get the
//     signal (resumed, claimed again, completed), the others time out
//     (failed, or resumed by auto-resume: suspension_timeout), and some
//     leave an unused pending waitpoint behind (pending_wp_expiry);
//   - slow tasks outrun their deadline (execution_deadline) or their
//     attempt timeout (attempt_timeout); retried tasks wait out a backoff
//     (delayed_promoter);
//   - race flows: two upstreams race for an any_of group with
//     cancel_remaining; when the quick one finishes, the slow one is
//     cancelled (edge_cancel_dispatcher);
//   - a few tasks need a "gpu" capability no worker has at first: the
//     workers park them in blocked:route, and once a gpu worker joins
//     (after 10 s) the unblock scanner re-admits them.
//
// It prints a one-line summary every few seconds and stops on SIGINT/SIGTERM
// or after -duration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
)

type counters struct {
	created, completed, failed, crashed, flows, cancelledFlows, usage atomic.Int64
	suspended, signalled, slow                                        atomic.Int64
}

// Kinds of the timer workload.
const (
	kindApproval = "demo.approval"
	kindSlow     = "demo.slow"
	kindLoser    = "demo.loser"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Valkey address host:port")
	duration := flag.Duration("duration", 0, "stop after this long (0: until interrupted)")
	rate := flag.Int("rate", 20, "solo executions created per second")
	crash := flag.Float64("crash", 0.1, "fraction of tasks whose worker 'crashes' (abandons the lease)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *addr, *rate, *crash); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, rate int, crash float64) error {
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return fmt.Errorf("connect %s: %w", addr, err)
	}
	defer vk.Close()
	d := &demo{vk: vk, lanes: []string{"default", "workers-a"}, crash: crash, waiting: make(chan suspended, 64)}
	defer d.close()
	if err := d.start(ctx); err != nil {
		return err
	}
	return d.loop(ctx, rate)
}

// demo is the workload: its client, its workers and what it counted.
type demo struct {
	vk      valkey.Client
	c       *client.Client
	n       counters
	lanes   []string
	crash   float64
	waiting chan suspended
	workers []*client.Worker
	budgets []keys.BudgetID
}

// start opens the client and starts what runs on its own: the signaller,
// two workers, the parked gpu tasks and the budgets.
func (d *demo) start(ctx context.Context) error {
	var err error
	if d.c, err = client.New(ctx, d.vk, client.Options{Namespace: "demo", Identity: "ffscan-demo"}); err != nil {
		return err
	}
	// Waitpoint tokens need a key on every partition (a noop when the
	// demo runs again on the same server).
	if err := d.c.RotateWaitpointSecret(ctx, "demo-k1", []byte("demo waitpoint secret"), time.Hour); err != nil {
		return err
	}
	go signaller(ctx, d.c, d.waiting, &d.n)
	for i := 0; i < 2; i++ {
		err := d.work(ctx, client.WorkerOptions{
			WorkerID: fmt.Sprintf("demo-worker-%d", i), Lanes: d.lanes,
			LeaseTTL: 2 * time.Second, MaxConcurrentTasks: 8,
			PollInterval: 20 * time.Millisecond, MaxPollInterval: 200 * time.Millisecond,
		}, d.crash)
		if err != nil {
			return err
		}
	}
	for i := 0; i < 5; i++ {
		if _, err := d.c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Kind: "demo.gpu",
			RequiredCapabilities: []string{"gpu"}}); err != nil {
			return err
		}
	}
	d.budgets, err = createBudgets(ctx, d.c)
	return err
}

// work starts a worker running the demo's handler.
func (d *demo) work(ctx context.Context, o client.WorkerOptions, crash float64) error {
	w, err := d.c.NewWorker(ctx, o)
	if err != nil {
		return err
	}
	d.workers = append(d.workers, w)
	go func() { _ = w.Run(ctx, handler(&d.n, crash, d.waiting)) }()
	return nil
}

func (d *demo) close() {
	for _, w := range d.workers {
		w.Close(context.Background())
	}
}

// loop drives the workload until ctx ends.
func (d *demo) loop(ctx context.Context, rate int) error {
	create := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	flowTick := time.NewTicker(3 * time.Second)
	cancelTick := time.NewTicker(7 * time.Second)
	usageTick := time.NewTicker(time.Second)
	report := time.NewTicker(5 * time.Second)
	timerTick := time.NewTicker(time.Second)
	tighten := time.After(10 * time.Second)
	defer func() {
		create.Stop()
		flowTick.Stop()
		cancelTick.Stop()
		usageTick.Stop()
		report.Stop()
		timerTick.Stop()
	}()
	for {
		var err error
		select {
		case <-ctx.Done():
			printSummary(&d.n)
			return ctx.Err()
		case <-create.C:
			err = d.createOne(ctx)
		case <-flowTick.C:
			if err = diamond(ctx, d.c); err != nil {
				err = fmt.Errorf("flow: %w", err)
			} else {
				d.n.flows.Add(1)
			}
		case <-cancelTick.C:
			err = d.cancelFlows(ctx)
		case <-usageTick.C:
			err = d.report(ctx)
		case <-tighten:
			err = d.tighten(ctx)
		case <-timerTick.C:
			if err = timerWork(ctx, d.c); err != nil {
				err = fmt.Errorf("timer work: %w", err)
			}
		case <-report.C:
			printSummary(&d.n)
		}
		if err != nil {
			return err
		}
	}
}

// createOne enqueues a solo execution on a random lane, a quarter of them
// with retries.
func (d *demo) createOne(ctx context.Context) error {
	lane := d.lanes[rand.IntN(len(d.lanes))]
	req := client.CreateRequest{Lane: lane, Kind: "demo.task", Payload: []byte(`{"n":1}`), Priority: rand.IntN(3)}
	if rand.IntN(4) == 0 {
		req.Retry = &client.RetryPolicy{MaxRetries: 2, Backoff: client.FixedBackoff(500 * time.Millisecond)}
	}
	if _, err := d.c.CreateExecution(ctx, req); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	d.n.created.Add(1)
	return nil
}

// cancelFlows cancels a flow for the cancel reconciler and starts a race
// flow for the edge-cancel dispatcher.
func (d *demo) cancelFlows(ctx context.Context) error {
	if err := cancelledFlow(ctx, d.c); err != nil {
		return fmt.Errorf("cancel flow: %w", err)
	}
	d.n.cancelledFlows.Add(1)
	if err := raceFlow(ctx, d.c); err != nil {
		return fmt.Errorf("race flow: %w", err)
	}
	return nil
}

// report reports usage on every budget.
func (d *demo) report(ctx context.Context) error {
	for _, b := range d.budgets {
		_, err := d.c.ReportUsage(ctx, client.UsageReport{Budget: b, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: 40}}})
		if err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		d.n.usage.Add(1)
	}
	return nil
}

// tighten is the demo's tenth second: a gpu worker joins (unblock
// re-admits the parked gpu tasks), and an operator lowers the hard limit
// of the budget that never resets below what it has used
// (budget_reconciler flags it).
func (d *demo) tighten(ctx context.Context) error {
	if err := d.work(ctx, client.WorkerOptions{WorkerID: "demo-gpu", Lanes: d.lanes,
		Capabilities: []string{"gpu"}, LeaseTTL: 2 * time.Second}, 0); err != nil {
		return err
	}
	lim := keys.Budget(d.c.Partitions(), d.budgets[2]).Limits()
	if err := d.vk.Do(ctx, d.vk.B().Hset().Key(lim).FieldValue().FieldValue("hard:tokens", "100").Build()).Error(); err != nil {
		return fmt.Errorf("tighten limit: %w", err)
	}
	return nil
}

// handler completes most tasks, fails a few (retried by policy) and
// abandons a fraction without completing: the lease then expires, which is
// what the lease_expiry scanner exists for.
func handler(n *counters, crash float64, waiting chan<- suspended) client.Handler {
	return func(ctx context.Context, t *client.Task) ([]byte, error) {
		switch t.Kind() {
		case kindApproval:
			return approval(ctx, t, n, waiting)
		case kindLoser:
			// Loses its race: runs until the dispatcher cancels it (its
			// lease goes, and ctx with it).
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		case kindSlow:
			// Outruns its deadline or attempt timeout: the timer scanners
			// end it, and the late result is refused by the fence.
			n.slow.Add(1)
			select {
			case <-time.After(3 * time.Second):
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		}
		r := rand.Float64()
		if r < crash && t.AttemptType() != "reclaim" {
			t.Abandon()
			n.crashed.Add(1)
			return nil, nil
		}
		select {
		case <-time.After(time.Duration(20+rand.IntN(200)) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r > 0.95 {
			n.failed.Add(1)
			return nil, errors.New("demo failure")
		}
		n.completed.Add(1)
		return []byte(`{"ok":true}`), nil
	}
}

// suspended is a suspension the signaller may answer.
type suspended struct {
	id keys.ExecutionID
	wp client.Waitpoint
}

// approval suspends a fresh approval task until the signal "approve" (2 s
// timeout, failing or auto-resuming); a resumed one completes. Now and then
// it also creates a pending waitpoint it never uses.
func approval(ctx context.Context, t *client.Task, n *counters, waiting chan<- suspended) ([]byte, error) {
	if t.AttemptType() == "resumed" {
		n.completed.Add(1)
		return []byte(`{"approved":true}`), nil
	}
	if rand.IntN(3) == 0 {
		if _, err := t.CreatePendingWaitpoint(ctx, "", time.Second); err != nil {
			return nil, err
		}
	}
	onTimeout := client.TimeoutFail
	if rand.IntN(2) == 0 {
		onTimeout = client.TimeoutAutoResume
	}
	s, err := t.Suspend(ctx, client.SuspendRequest{Reason: client.ReasonWaitingForApproval,
		Signals: []string{"approve"}, Timeout: 2 * time.Second, OnTimeout: onTimeout})
	if err != nil {
		return nil, err
	}
	n.suspended.Add(1)
	select {
	case waiting <- suspended{id: t.ID(), wp: s.Waitpoint}:
	default: // the signaller is behind: this one times out
	}
	return nil, nil
}

// signaller approves about half of the suspensions after a short wait.
func signaller(ctx context.Context, c *client.Client, waiting <-chan suspended, n *counters) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-waiting:
			if rand.IntN(2) == 0 {
				continue
			}
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if _, err := c.DeliverSignal(ctx, s.id, s.wp, client.Signal{Name: "approve", SourceIdentity: "demo"}); err == nil {
				n.signalled.Add(1)
			}
		}
	}
}

// timerWork creates one approval task and one slow task (with a 1 s
// deadline or a 300 ms attempt timeout).
func timerWork(ctx context.Context, c *client.Client) error {
	if _, err := c.CreateExecution(ctx, client.CreateRequest{Lane: "default", Kind: kindApproval}); err != nil {
		return err
	}
	req := client.CreateRequest{Lane: "workers-a", Kind: kindSlow}
	if rand.IntN(2) == 0 {
		req.Deadline = time.Now().Add(time.Second)
	} else {
		req.AttemptTimeout = 300 * time.Millisecond
	}
	_, err := c.CreateExecution(ctx, req)
	return err
}

// raceFlow creates {quick, loser} -> D under any_of with
// cancel_remaining: the quick one completes first and decides the group,
// and the dispatcher cancels the loser.
func raceFlow(ctx context.Context, c *client.Client) error {
	f, err := c.CreateFlow(ctx, client.CreateFlowRequest{Kind: "demo.race"})
	if err != nil {
		return err
	}
	fid := f.ID
	var ids [3]keys.ExecutionID
	for i, kind := range []string{"demo.quick", kindLoser, "demo.winner-next"} {
		r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Kind: kind})
		if err != nil {
			return err
		}
		ids[i] = r.ID
	}
	if _, err := c.SetEdgeGroupPolicy(ctx, fid, ids[2], client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"}); err != nil {
		return err
	}
	for _, up := range ids[:2] {
		if _, err := c.AddDependency(ctx, client.DependencyRequest{Flow: fid, Upstream: up, Downstream: ids[2]}); err != nil {
			return err
		}
	}
	return nil
}

// diamond creates A->{B,C}->D; workers run A, and the completion listener
// (or the dependency reconciler) releases B and C, then D.
func diamond(ctx context.Context, c *client.Client) error {
	f, err := c.CreateFlow(ctx, client.CreateFlowRequest{Kind: "demo.diamond"})
	if err != nil {
		return err
	}
	ids := make([]keys.ExecutionID, 4)
	for i := range ids {
		fid := f.ID
		r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Kind: fmt.Sprintf("demo.step%d", i)})
		if err != nil {
			return err
		}
		ids[i] = r.ID
	}
	for _, e := range [][2]int{{0, 1}, {0, 2}, {1, 3}, {2, 3}} {
		if _, err := c.AddDependency(ctx, client.DependencyRequest{Flow: f.ID, Upstream: ids[e[0]], Downstream: ids[e[1]]}); err != nil {
			return err
		}
	}
	return nil
}

// cancelledFlow creates a flow whose members wait on a parent that is never
// released, then cancels it with grace 0 and no wait: the cancel
// reconciler drains the members.
func cancelledFlow(ctx context.Context, c *client.Client) error {
	f, err := c.CreateFlow(ctx, client.CreateFlowRequest{Kind: "demo.cancelled"})
	if err != nil {
		return err
	}
	var parent keys.ExecutionID
	for i := 0; i < 4; i++ {
		fid := f.ID
		r, err := c.CreateExecution(ctx, client.CreateRequest{Flow: &fid, Lane: "default", Kind: "demo.doomed", Delay: time.Hour})
		if err != nil {
			return err
		}
		if i == 0 {
			parent = r.ID
			continue
		}
		if _, err := c.AddDependency(ctx, client.DependencyRequest{Flow: f.ID, Upstream: parent, Downstream: r.ID}); err != nil {
			return err
		}
	}
	grace := time.Duration(0)
	_, err = c.CancelFlow(ctx, f.ID, client.CancelFlowOptions{Reason: "demo", Grace: &grace})
	return err
}

// createBudgets makes two budgets reset every 5 s (budget_reset) and one
// that never resets (budget_reconciler flags it once usage passes its hard
// limit).
func createBudgets(ctx context.Context, c *client.Client) ([]keys.BudgetID, error) {
	var out []keys.BudgetID
	for i := 0; i < 3; i++ {
		req := client.CreateBudgetRequest{
			ScopeType: "lane", ScopeID: "default",
			Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: 1000000, Soft: 200}},
		}
		if i < 2 {
			req.ResetInterval = 5 * time.Second
		}
		r, err := c.CreateBudget(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, r.ID)
	}
	return out, nil
}

func printSummary(n *counters) {
	fmt.Printf("demo: created %d, completed %d, failed %d, crashed %d, flows %d, cancelled flows %d, usage reports %d, suspended %d, signalled %d, slow %d\n",
		n.created.Load(), n.completed.Load(), n.failed.Load(), n.crashed.Load(), n.flows.Load(), n.cancelledFlows.Load(), n.usage.Load(),
		n.suspended.Load(), n.signalled.Load(), n.slow.Load())
}
