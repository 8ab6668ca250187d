package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// clusterInterval is short so that a burst larger than one cycle's
// follow-ups can drain does not wait an interval in between: the span
// measures throughput, not the cycle's phase. FCALLs per lease then
// include the re-checks of marked entries that later cycles make.
const clusterInterval = 250 * time.Millisecond

type clusterRun struct {
	Target       string
	Leases       int
	Drain        time.Duration // first marking to last (server stamps, ms)
	FCallPerItem float64
}

func (r clusterRun) rate() float64 { return float64(r.Leases) / r.Drain.Seconds() }

type clusterResult struct {
	Runs []clusterRun // single node, then the cluster
	Load string
}

// runCluster drains the same burst of expired leases with one host
// process, first on the bench's single server, then on a fresh 3-master
// cluster, and compares the throughputs. On one machine the cluster's
// three servers share its cores with the host, so the ratio shows what
// the host keeps up with, not what three machines would give.
func (b *bench) runCluster(ctx context.Context, n int) (*clusterResult, error) {
	res := &clusterResult{Load: measure.Load()}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	single, err := b.drainOn(ctx, "single node", b.client, b.lib, []string{b.srv.Addr}, n)
	if err != nil {
		return nil, err
	}
	res.Runs = append(res.Runs, single)
	// The bench server is idle from here on; stop nothing, it is small.
	cl, err := testserver.StartCluster(3)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	lib := lua.New(client, lua.Options{})
	if _, err := lib.Ensure(ctx); err != nil {
		return nil, err
	}
	if _, _, err := boot.EnsurePartitions(ctx, client, b.parts); err != nil {
		return nil, err
	}
	clustered, err := b.drainOn(ctx, "3-master cluster", client, lib, cl.Addrs(), n)
	if err != nil {
		return nil, err
	}
	res.Runs = append(res.Runs, clustered)
	return res, nil
}

// drainOn runs a host with lease_expiry on the store at addrs, plants n
// leases expiring together and measures from the first marking to the
// last, by the lease_expired_at stamps the library writes (FCALLs counted
// on every node).
func (b *bench) drainOn(ctx context.Context, target string, client valkey.Client, lib *lua.Library, addrs []string, n int) (clusterRun, error) {
	return b.drainOnWith(ctx, target, client, lib, addrs, n, "")
}

// drainOnWith is drainOn with extra appended to the host's config.
func (b *bench) drainOnWith(ctx context.Context, target string, client valkey.Client, lib *lua.Library, addrs []string, n int, extra string) (clusterRun, error) {
	return b.drainLeases(ctx, drainSetup{target: target, client: client, lib: lib, addrs: addrs, n: n, extra: extra})
}

// drainSetup is one drain of expired leases by a host with lease_expiry.
type drainSetup struct {
	target string
	client valkey.Client
	lib    *lua.Library
	addrs  []string
	n      int
	extra  string // appended to the host's config
	// backlog plants the leases before the host starts, so that the host
	// drains a backlog it finds at its first sweep; otherwise the host
	// runs while they are planted and marks them as they come.
	backlog bool
}

// drainLeases plants d.n leases expiring 1 ms after their claim and
// measures a host with lease_expiry marking them all, from the first
// marking to the last by the lease_expired_at stamps the library writes
// (FCALLs counted on every node).
func (b *bench) drainLeases(ctx context.Context, d drainSetup) (clusterRun, error) {
	target, client, lib, addrs, n := d.target, d.client, d.lib, d.addrs, d.n
	run := clusterRun{Target: target, Leases: n}
	start := func() (*hostproc.Proc, error) {
		return hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir, ValkeyAddr: addrs[0], Cluster: len(addrs) > 1,
			Scanners: []hostproc.Scanner{{Name: leaseexpiry.Name, Plugin: "leaseexpiry", Interval: clusterInterval, NoActionBudget: true}},
			LogLevel: "warn", Log: io.Writer(os.Stderr), Extra: d.extra}, 30*time.Second)
	}
	var h *hostproc.Proc
	if !d.backlog {
		var err error
		if h, err = start(); err != nil {
			return run, err
		}
		defer h.Stop()
	}
	fcalls := func() (int64, error) {
		var sum int64
		for _, a := range addrs {
			info, err := measure.RawInfo(a, "commandstats")
			if err != nil {
				return 0, err
			}
			sum += measure.ParseCommandStats(info)["fcall"]
		}
		return sum, nil
	}
	s := seed.New(lib, b.parts)
	ids := s.IDs(n)
	if err := s.Prepare(ctx, ids); err != nil {
		return run, err
	}
	if err := s.Claim(ctx, ids, func(int) time.Duration { return time.Millisecond }); err != nil {
		return run, err
	}
	base, err := fcalls()
	if err != nil {
		return run, err
	}
	if d.backlog {
		if h, err = start(); err != nil {
			return run, err
		}
		defer h.Stop()
	}
	// Wait for the marking FCALLs (cheap to poll), then for every lease
	// read back as marked.
	limit := 2*clusterInterval + 60*time.Second
	deadline := time.Now().Add(limit)
	for {
		f, err := fcalls()
		if err != nil {
			return run, err
		}
		if f-base >= int64(n) {
			marked, err := countMarked(ctx, client, ids)
			if err != nil {
				return run, err
			}
			if marked == n {
				break
			}
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("%s: leases not all marked after %s", target, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The drain's span by the server's own stamps: the library records
	// when it marked each lease.
	stamps, err := seed.Fields(ctx, client, ids, "lease_expired_at")
	if err != nil {
		return run, err
	}
	var lo, hi int64
	for i, v := range stamps {
		ms, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			return run, fmt.Errorf("%s: lease %s: lease_expired_at %q: %w", target, ids[i], v[0], err)
		}
		if i == 0 || ms < lo {
			lo = ms
		}
		hi = max(hi, ms)
	}
	run.Drain = time.Duration(max(hi-lo, 1)) * time.Millisecond
	f, err := fcalls()
	if err != nil {
		return run, err
	}
	run.FCallPerItem = float64(f-base) / float64(n)
	b.logf("cluster: %s: %d leases marked in %s (%.0f/s), %.2f FCALLs per lease", target, n, run.Drain.Round(time.Millisecond), run.rate(), run.FCallPerItem)
	return run, nil
}

func (r *clusterResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("7. CLUSTER: one host process with lease_expiry drains the same burst of expired leases on a single")
	p("   node and on a 3-master cluster (all on this machine); first marking to last; load %s", r.Load)
	for _, run := range r.Runs {
		p("   %-16s %7d leases in %8s = %8.0f/s; FCALLs per lease %.2f", run.Target, run.Leases, run.Drain.Round(time.Millisecond), run.rate(), run.FCallPerItem)
	}
	if len(r.Runs) == 2 {
		p("   cluster/single throughput ratio %.2f (the three servers share this machine's cores with the host)", r.Runs[1].rate()/r.Runs[0].rate())
	}
}
