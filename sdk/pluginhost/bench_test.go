package pluginhost_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/testscanners"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// BenchmarkScanPartition measures one ScanPartition round trip of the echo
// scanner linked in and through a plugin subprocess: with no candidates
// (the RPC alone) and with 50 or 500 (the RPC plus one callback batch of
// that many commands answered in memory, so Valkey's own time is not in
// the figure). Besides the wall time per call it reports the CPU time of
// both processes per call (cpu-us/op; from /proc, so Linux only), which is
// what a busy host pays: the plugin variants are the default (batches on
// the inherited socket), the gRPC batch stream and the unary protobuf
// batches older plugins send, and no mTLS.
func BenchmarkScanPartition(b *testing.B) {
	cb := &echoCallbacks{}
	type variant struct {
		name string
		s    scannerapi.Scanner
		pid  int
	}
	launch := func(name string, cfg pluginhost.LaunchConfig) variant {
		cfg.Path, cfg.Callbacks = testPlugin(b), cb
		p, err := pluginhost.Launch(context.Background(), cfg)
		require.NoError(b, err)
		b.Cleanup(p.Kill)
		s, _ := p.Scanner("echo")
		return variant{name, s, p.Pid()}
	}
	variants := []variant{
		{"linked", pluginhost.Linked(&testscanners.Echo{}, cb), 0},
		launch("plugin", pluginhost.LaunchConfig{}),
		launch("plugin-grpcstream", pluginhost.LaunchConfig{CallbackPath: pluginhost.CallbackStream}),
		launch("plugin-unary", pluginhost.LaunchConfig{CallbackPath: pluginhost.CallbackUnary}),
		launch("plugin-nomtls", pluginhost.LaunchConfig{NoMTLS: true}),
	}
	for _, n := range []int{0, 50, 500} {
		req := &scannerapi.ScanRequest{Scanner: "echo", Partition: keys.Partition{Family: keys.FamilyFlow, Index: 1}, Batch: 50}
		for i := 0; i < n; i++ {
			req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "due", Member: fmt.Sprintf("{fp:1}:member-%03d", i)})
		}
		for _, v := range variants {
			b.Run(fmt.Sprintf("%s/candidates=%d", v.name, n), func(b *testing.B) {
				ctx := context.Background()
				before := cpuTicks(os.Getpid()) + cpuTicks(v.pid)
				for b.Loop() {
					if _, err := v.s.ScanPartition(ctx, nil, req); err != nil {
						b.Fatal(err)
					}
				}
				if after := cpuTicks(os.Getpid()) + cpuTicks(v.pid); before >= 0 && after >= 0 {
					// /proc counts in clock ticks of 10 ms (USER_HZ 100).
					b.ReportMetric(float64(after-before)*1e4/float64(b.N), "cpu-us/op")
				}
			})
		}
	}
}

// cpuTicks is the user+system CPU time of process pid in clock ticks, or
// -1 where /proc cannot tell (pid 0 counts as no time).
func cpuTicks(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces) start after
	// the last ')'; utime and stime are fields 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return u + s
}
