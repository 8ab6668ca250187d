package scannerapi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/internal/testscanners"
)

// BenchmarkScanPartition measures one ScanPartition round trip of the echo
// scanner linked in and through a plugin subprocess: with no candidates
// (the RPC alone) and with 50 (the RPC plus one callback batch of 50
// commands answered in memory, so Valkey's own time is not in the figure).
func BenchmarkScanPartition(b *testing.B) {
	cb := &echoCallbacks{}
	launch := func(noMTLS bool) scannerapi.Scanner {
		p, err := scannerapi.Launch(context.Background(), scannerapi.LaunchConfig{Path: testPlugin(b), Callbacks: cb, NoMTLS: noMTLS})
		require.NoError(b, err)
		b.Cleanup(p.Kill)
		s, _ := p.Scanner("echo")
		return s
	}
	remote, plain := launch(false), launch(true)
	linked := scannerapi.Linked(&testscanners.Echo{}, cb)

	for _, n := range []int{0, 50} {
		req := &scannerapi.ScanRequest{Scanner: "echo", Partition: keys.Partition{Family: keys.FamilyFlow, Index: 1}, Batch: 50}
		for i := 0; i < n; i++ {
			req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: "due", Member: fmt.Sprintf("{fp:1}:member-%02d", i)})
		}
		for _, m := range []struct {
			name string
			s    scannerapi.Scanner
		}{{"linked", linked}, {"plugin", remote}, {"plugin-nomtls", plain}} {
			b.Run(fmt.Sprintf("%s/candidates=%d", m.name, n), func(b *testing.B) {
				ctx := context.Background()
				for b.Loop() {
					if _, err := m.s.ScanPartition(ctx, nil, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
