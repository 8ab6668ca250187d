package main

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
)

// idleall runs FlowFabric's seventeen scanners, the set every shipped
// Valkey configuration enables: a scanner added to (or renamed in) the
// configurations and not here, or here and not there, fails this test
// instead of going unmeasured.
func TestIdleAllRunsTheConfiguredScanners(t *testing.T) {
	t.Parallel()
	var want []string
	for _, s := range ffScanners {
		want = append(want, s.name)
	}
	sort.Strings(want)
	for _, name := range []string{"ffscan.yaml", "dev.yaml", "cluster.yaml", "demo.yaml"} {
		cfg, err := config.Load(config.Sources{File: filepath.Join("..", "..", "..", "configs", name), Environ: []string{}})
		require.NoError(t, err, name)
		var enabled []string
		for n, s := range cfg.Scanners {
			if s.Enabled {
				enabled = append(enabled, n)
			}
		}
		sort.Strings(enabled)
		assert.Equal(t, want, enabled, "configs/%s", name)
	}
}
