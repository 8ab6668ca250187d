// Command worker is a runnable tour of sdk/client: it enqueues a batch of
// executions on two lanes, runs a pool of workers against them with
// Worker.Run, prints what each worker did, and exits once every execution
// has finished.
//
//	go run ./examples/worker -addr 127.0.0.1:6379 -n 20 -workers 3
//
// It loads the flowfabric library if the server lacks it. Executions whose
// payload starts with "bad" fail on purpose (no retry policy, so they fail
// terminally); the others complete with an upper-cased copy of their
// payload as the result.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/valkey-io/valkey-go"
)

type config struct {
	addr    string
	n       int
	workers int
	timeout time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:6379", "Valkey (or Redis 7) address")
	flag.IntVar(&cfg.n, "n", 20, "executions to enqueue")
	flag.IntVar(&cfg.workers, "workers", 3, "workers in the pool")
	flag.DurationVar(&cfg.timeout, "timeout", time.Minute, "give up after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// lanes the example spreads work over; every worker serves both.
var lanes = []string{"images", "email"}

func run(ctx context.Context, cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{cfg.addr}, DisableCache: true})
	if err != nil {
		return fmt.Errorf("connect %s: %w", cfg.addr, err)
	}
	defer vk.Close()
	lib := lua.New(vk, lua.Options{})
	if _, err := lib.Ensure(ctx); err != nil {
		return fmt.Errorf("load library: %w", err)
	}
	c, err := client.New(ctx, vk, client.Options{Library: lib, Identity: "examples/worker"})
	if err != nil {
		return err
	}

	ids, err := enqueue(ctx, c, cfg.n, out)
	if err != nil {
		return err
	}
	pool, err := startPool(ctx, c, cfg.workers, out)
	if err != nil {
		return err
	}
	waitErr := waitFinished(ctx, c, ids)
	if err := pool.stop(); err != nil && waitErr == nil {
		waitErr = err
	}
	if waitErr != nil {
		return waitErr
	}
	return summarize(ctx, c, ids, out)
}

// enqueue creates n executions, alternating lanes; every fifth is "bad".
func enqueue(ctx context.Context, c *client.Client, n int, out io.Writer) ([]keys.ExecutionID, error) {
	ids := make([]keys.ExecutionID, 0, n)
	for i := 0; i < n; i++ {
		payload := fmt.Sprintf("item-%02d", i)
		if i%5 == 4 {
			payload = "bad-" + payload
		}
		r, err := c.CreateExecution(ctx, client.CreateRequest{
			Lane: lanes[i%len(lanes)], Kind: "uppercase", Priority: i % 3,
			Payload: []byte(payload), Tags: map[string]string{"example.index": fmt.Sprint(i)},
		})
		if err != nil {
			return nil, fmt.Errorf("create %d: %w", i, err)
		}
		ids = append(ids, r.ID)
	}
	fmt.Fprintf(out, "enqueued %d executions on lanes %s\n", n, strings.Join(lanes, ", "))
	return ids, nil
}

// pool is the running workers and their Run loops.
type pool struct {
	workers []*client.Worker
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
}

func startPool(ctx context.Context, c *client.Client, n int, out io.Writer) (*pool, error) {
	runCtx, cancel := context.WithCancel(ctx)
	p := &pool{cancel: cancel}
	var outMu sync.Mutex
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("worker-%d", i+1)
		w, err := c.NewWorker(ctx, client.WorkerOptions{
			WorkerID: "example", Lanes: lanes, MaxConcurrentTasks: 2, LeaseTTL: 5 * time.Second,
			PollInterval: 20 * time.Millisecond, MaxPollInterval: 200 * time.Millisecond,
		})
		if err != nil {
			_ = p.stop()
			return nil, err
		}
		p.workers = append(p.workers, w)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			err := w.Run(runCtx, func(ctx context.Context, t *client.Task) ([]byte, error) {
				time.Sleep(10 * time.Millisecond) // pretend to work
				verdict, result, err := "completed", []byte(strings.ToUpper(string(t.Payload()))), error(nil)
				if strings.HasPrefix(string(t.Payload()), "bad") {
					verdict, result, err = "failed", nil, errors.New("bad input")
				}
				outMu.Lock()
				fmt.Fprintf(out, "%s: %s lane=%s payload=%q attempt=%d -> %s\n",
					name, t.ID(), t.Lane(), t.Payload(), t.AttemptIndex(), verdict)
				outMu.Unlock()
				return result, err
			})
			if err != nil {
				p.mu.Lock()
				p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
				p.mu.Unlock()
			}
		}()
	}
	// The handlers may already be writing to out.
	outMu.Lock()
	fmt.Fprintf(out, "started %d workers\n", n)
	outMu.Unlock()
	return p, nil
}

// stop ends the Run loops (in-flight handlers finish first) and closes
// the workers, which removes them from the worker registry.
func (p *pool) stop() error {
	p.cancel()
	p.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range p.workers {
		if err := w.Close(ctx); err != nil {
			p.errs = append(p.errs, err)
		}
	}
	return errors.Join(p.errs...)
}

// waitFinished polls until every execution is terminal.
func waitFinished(ctx context.Context, c *client.Client, ids []keys.ExecutionID) error {
	for {
		done := 0
		for _, id := range ids {
			s, err := c.GetExecution(ctx, id)
			if err != nil {
				return err
			}
			if s.Terminal() {
				done++
			}
		}
		if done == len(ids) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d executions finished before giving up: %w", done, len(ids), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func summarize(ctx context.Context, c *client.Client, ids []keys.ExecutionID, out io.Writer) error {
	counts := map[string]int{}
	for _, id := range ids {
		s, err := c.GetExecution(ctx, id)
		if err != nil {
			return err
		}
		counts[s.TerminalOutcome]++
	}
	first, err := c.Result(ctx, ids[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "done: %d succeeded, %d failed (result of the first: %q)\n",
		counts[client.OutcomeSuccess], counts[client.OutcomeFailed], first)
	return nil
}
