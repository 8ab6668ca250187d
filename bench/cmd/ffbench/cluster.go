package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/internal/testenv"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
)

// clusterInterval is long so that one cycle (with its follow-ups) drains
// the burst and no later cycle re-checks marked entries: the FCALLs
// counted are the marking ones.
const clusterInterval = 5 * time.Second

type clusterRun struct {
	Target       string
	Leases       int
	Drain        time.Duration // first marking to last
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
	cl, err := testenv.StartCluster(3)
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
// leases expiring together and measures from the first marking FCALL to
// the last (FCALLs counted on every node).
func (b *bench) drainOn(ctx context.Context, target string, client valkey.Client, lib *lua.Library, addrs []string, n int) (clusterRun, error) {
	run := clusterRun{Target: target, Leases: n}
	h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir, ValkeyAddr: addrs[0], Cluster: len(addrs) > 1,
		Scanners: []hostproc.Scanner{{Name: leaseexpiry.Name, Plugin: "leaseexpiry", Interval: clusterInterval}},
		LogLevel: "warn", Log: io.Writer(os.Stderr)}, 30*time.Second)
	if err != nil {
		return run, err
	}
	defer h.Stop()
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
	var first time.Time
	deadline := time.Now().Add(2*clusterInterval + 60*time.Second)
	for {
		f, err := fcalls()
		if err != nil {
			return run, err
		}
		if f > base && first.IsZero() {
			first = time.Now()
		}
		if f-base >= int64(n) {
			run.Drain = time.Since(first)
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("%s: %d of %d marking FCALLs after %s", target, f-base, n, 2*clusterInterval+60*time.Second)
		}
		time.Sleep(5 * time.Millisecond)
	}
	marked, err := countMarked(ctx, client, ids)
	if err != nil {
		return run, err
	}
	if marked != n {
		return run, fmt.Errorf("%s: %d FCALLs ran but %d of %d leases are marked", target, n, marked, n)
	}
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
