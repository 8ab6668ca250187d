package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/bench/hostproc"
	"github.com/ffscan/ffscan/bench/measure"
	"github.com/ffscan/ffscan/bench/seed"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
)

// startHost runs the real host binary with lease_expiry (plugin binary
// leaseexpiry) at its default interval against the bench server.
func (b *bench) startHost(ctx context.Context) (*hostproc.Proc, error) {
	var logw io.Writer
	level := "warn"
	if b.verbose {
		logw, level = os.Stderr, "info"
	} else {
		logw = os.Stderr // warnings and errors only
	}
	return hostproc.Start(ctx, hostproc.Options{
		Binary:     b.binDir + "/ffscan",
		PluginDir:  b.pluginDir,
		ValkeyAddr: b.srv.Addr,
		Scanners:   []hostproc.Scanner{{Name: leaseexpiry.Name, Plugin: "leaseexpiry"}},
		LogLevel:   level,
		Log:        logw,
	}, 30*time.Second)
}

type reclaimResult struct {
	Burst      int
	Lead       time.Duration // TTL of the first lease of the wave
	Spread     time.Duration // TTLs grow linearly over this
	ClaimWave  time.Duration // how long the claim wave took
	Interval   time.Duration
	Waited     time.Duration // from the end of the wave to the last marking seen
	Latency    measure.Dist
	Unmarked   int
	Cycles     uint64
	LoadBefore string
	LoadAfter  string
}

// runReclaim starts the host, lets it settle, then claims n executions in
// one pipelined wave with leases whose expiries spread over one second,
// waits until the host has marked them all, and reads each core's
// lease_expires_at and lease_expired_at (both stamped by the server's
// clock inside the library).
func (b *bench) runReclaim(ctx context.Context, n int) (*reclaimResult, error) {
	res := &reclaimResult{Burst: n, Lead: 2 * time.Second, Spread: time.Second, Interval: leaseexpiry.DefaultInterval,
		LoadBefore: measure.Load()}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	s := seed.New(b.lib, b.parts)
	ids := s.IDs(n)
	if err := s.Prepare(ctx, ids); err != nil {
		return nil, err
	}
	h, err := b.startHost(ctx)
	if err != nil {
		return nil, err
	}
	defer h.Stop()
	// Past the start jitter and a couple of idle cycles.
	time.Sleep(2 * res.Interval)
	st0, err := h.Scanner(ctx, leaseexpiry.Name)
	if err != nil {
		return nil, err
	}

	t0 := time.Now()
	err = s.Claim(ctx, ids, func(i int) time.Duration {
		return res.Lead + time.Duration(int64(res.Spread)*int64(i)/int64(n))
	})
	if err != nil {
		return nil, err
	}
	res.ClaimWave = time.Since(t0)
	b.logf("reclaim: claimed %d leases (expiring %s..%s after their claim) in %s", n, res.Lead, res.Lead+res.Spread, res.ClaimWave.Round(time.Millisecond))

	// Wait until the host reports them all processed (or give up after the
	// leases' TTL plus ten intervals).
	deadline := time.Now().Add(res.Lead + res.Spread + 10*res.Interval)
	t1 := time.Now()
	var st = st0
	for st.Processed-st0.Processed < int64(n) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if st, err = h.Scanner(ctx, leaseexpiry.Name); err != nil {
			return nil, err
		}
	}
	res.Waited = time.Since(t1)
	res.Cycles = st.Cycle - st0.Cycle

	vals, err := seed.Fields(ctx, b.client, ids, "lease_expires_at", "lease_expired_at")
	if err != nil {
		return nil, err
	}
	var lat []time.Duration
	for _, v := range vals {
		exp, err1 := strconv.ParseInt(v[0], 10, 64)
		marked, err2 := strconv.ParseInt(v[1], 10, 64)
		if err1 != nil || err2 != nil {
			res.Unmarked++
			continue
		}
		lat = append(lat, time.Duration(marked-exp)*time.Millisecond)
	}
	res.Latency = measure.Distribution(lat)
	res.LoadAfter = measure.Load()
	b.logf("reclaim: %s; %d unmarked", res.Latency, res.Unmarked)
	if res.Unmarked > 0 {
		return res, fmt.Errorf("%d of %d leases not marked within %s", res.Unmarked, n, res.Lead+res.Spread+10*res.Interval)
	}
	return res, nil
}

func (r *reclaimResult) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("2. RECLAIM LATENCY: %d leases claimed in one wave (%s), TTLs %s..%s, host process with the", r.Burst,
		r.ClaimWave.Round(time.Millisecond), r.Lead, r.Lead+r.Spread)
	p("   lease_expiry plugin at its default %s interval; load %s -> %s", r.Interval, r.LoadBefore, r.LoadAfter)
	p("   expiry -> marked: %s", r.Latency)
	p("   %d host cycles while waiting; %d leases unmarked", r.Cycles, r.Unmarked)
	p("   p99 %s (target <= 3000 ms: %s)", measure.Ms(r.Latency.P99), verdict(r.Unmarked == 0 && r.Latency.P99 <= 3*time.Second))
}
