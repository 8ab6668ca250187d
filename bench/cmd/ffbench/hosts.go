package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
)

// hostsInterval is lease_expiry's interval in the hosts benchmark.
const hostsInterval = 5 * time.Second

// hostsRun is one count of hosts sharing the keyspace.
type hostsRun struct {
	Hosts        int
	Leases       int
	Took         time.Duration // from the leases' expiry to all marked
	FCallPerItem float64
}

type hostsResult struct {
	Runs     []hostsRun
	Takeover time.Duration // from kill -9 of one of two hosts to all its leases marked
	Load     string
}

// startHosts starts n hosts with lease_expiry on the bench server and
// waits until they have divided the partitions.
func (b *bench) startHosts(ctx context.Context, n int) ([]*hostproc.Proc, error) {
	var hs []*hostproc.Proc
	for i := 0; i < n; i++ {
		h, err := hostproc.Start(ctx, hostproc.Options{Binary: b.binDir + "/ffscan", PluginDir: b.pluginDir,
			// A long interval: the FCALLs counted until the last lease is
			// marked are the marking ones, not the re-checks of marked
			// entries a following cycle makes (lease_expiry remembers an
			// entry only once the server has read it back as marked).
			ValkeyAddr: b.srv.Addr, Scanners: []hostproc.Scanner{{Name: leaseexpiry.Name, Plugin: "leaseexpiry", Interval: hostsInterval}},
			LogLevel: "warn", Log: io.Writer(os.Stderr)}, 30*time.Second)
		if err != nil {
			for _, x := range hs {
				x.Stop()
			}
			return nil, err
		}
		hs = append(hs, h)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		total, agreed := 0, true
		for _, h := range hs {
			st, err := h.Status(ctx)
			if err != nil || st.Sharing == nil || len(st.Sharing.Hosts) != n {
				agreed = false
				break
			}
			total += st.Sharing.Owned["flow"]
		}
		if agreed && total == int(b.parts.Flow) {
			return hs, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, h := range hs {
		h.Stop()
	}
	return nil, fmt.Errorf("%d hosts did not divide the partitions within 30 s", n)
}

// markAll seeds n leases expiring in lead and waits until all are marked;
// it returns the time from their expiry to the last marking and the
// FCALLs the server ran meanwhile.
func (b *bench) markAll(ctx context.Context, n int, lead time.Duration) (time.Duration, int64, error) {
	s := seed.New(b.lib, b.parts)
	ids := s.IDs(n)
	if err := s.Prepare(ctx, ids); err != nil {
		return 0, 0, err
	}
	info, err := measure.RawInfo(b.srv.Addr, "commandstats")
	if err != nil {
		return 0, 0, err
	}
	before := measure.ParseCommandStats(info)["fcall"]
	if err := s.Claim(ctx, ids, func(int) time.Duration { return lead }); err != nil {
		return 0, 0, err
	}
	expired := time.Now().Add(lead)
	deadline := expired.Add(60 * time.Second)
	for {
		vals, err := seed.Fields(ctx, b.client, ids, "ownership_state")
		if err != nil {
			return 0, 0, err
		}
		left := 0
		for _, v := range vals {
			if v[0] != "lease_expired_reclaimable" {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%d of %d leases unmarked after 60 s", left, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(expired)
	info, err = measure.RawInfo(b.srv.Addr, "commandstats")
	if err != nil {
		return 0, 0, err
	}
	// The claims' FCALLs are counted too: subtract them.
	return took, measure.ParseCommandStats(info)["fcall"] - before - int64(n), nil
}

// runHosts measures 1, 2 and 3 hosts sharing the keyspace (FCALLs per
// marked lease must stay 1: no partition is scanned twice), and how long
// the partitions of a host killed with SIGKILL stay unscanned.
func (b *bench) runHosts(ctx context.Context, n int) (*hostsResult, error) {
	res := &hostsResult{Load: measure.Load()}
	for k := 1; k <= 3; k++ {
		if err := b.flush(ctx); err != nil {
			return nil, err
		}
		hs, err := b.startHosts(ctx, k)
		if err != nil {
			return nil, err
		}
		took, fcalls, err := b.markAll(ctx, n, 2*time.Second)
		for _, h := range hs {
			h.Stop()
		}
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, hostsRun{Hosts: k, Leases: n, Took: took, FCallPerItem: float64(fcalls) / float64(n)})
		b.logf("hosts: %d host(s): %d leases marked %s after expiry, %.2f FCALLs per lease", k, n, took.Round(time.Millisecond), float64(fcalls)/float64(n))
	}
	// Takeover: two hosts, one killed; leases in every partition expire
	// right after the kill.
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	hs, err := b.startHosts(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, h := range hs {
			h.Stop()
		}
	}()
	_ = syscall.Kill(-hs[1].Pid(), syscall.SIGKILL)
	killed := time.Now()
	if _, _, err := b.markAll(ctx, int(b.parts.Flow), 100*time.Millisecond); err != nil {
		return nil, err
	}
	res.Takeover = time.Since(killed)
	b.logf("hosts: takeover after kill -9: all leases marked %s after the kill", res.Takeover.Round(time.Millisecond))
	return res, nil
}

func (r *hostsResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("6. HOSTS SHARING ONE KEYSPACE: 1, 2 and 3 host processes with lease_expiry (interval %s); leases in", hostsInterval)
	p("   every partition expiring together, marked within one cycle of each host; load %s", r.Load)
	for _, run := range r.Runs {
		// The time is set by where each host's cycle stands when the
		// leases expire (up to one interval), not by throughput.
		p("   %d host(s): %d leases all marked %s after expiry; FCALLs per lease %.2f (target 1.00: %s)",
			run.Hosts, run.Leases, run.Took.Round(time.Millisecond), run.FCallPerItem, verdict(run.FCallPerItem < 1.005))
	}
	p("   kill -9 of one of two hosts -> every partition scanned again: %s (target <= 15 s: %s)",
		r.Takeover.Round(100*time.Millisecond), verdict(r.Takeover <= 15*time.Second))
}
