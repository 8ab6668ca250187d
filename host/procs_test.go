package host

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/internal/testenv"
)

// plugin_procs reaches each plugin process as its GOMAXPROCS (the Go
// runtime reads it at start); 0 leaves the variable out, so Go's default
// applies.
func TestPluginProcsSetsTheirGOMAXPROCS(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	for _, tc := range []struct {
		procs int
		want  string // the GOMAXPROCS entry, "" for none
	}{{1, "GOMAXPROCS=1"}, {3, "GOMAXPROCS=3"}, {0, ""}} {
		t.Run(fmt.Sprint(tc.procs), func(t *testing.T) {
			cfg := testConfig(t, srv.Addr, config.Scanner{})
			cfg.PluginProcs = tc.procs
			h, stop := running(t, cfg)
			defer stop()
			var pid int
			require.Eventually(t, func() bool {
				for _, s := range h.Status().Scanners {
					pid = s.Pid
				}
				return pid > 0
			}, 30*time.Second, 10*time.Millisecond)
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			require.NoError(t, err)
			var got []string
			for _, kv := range strings.Split(string(env), "\x00") {
				if strings.HasPrefix(kv, "GOMAXPROCS=") {
					got = append(got, kv)
				}
			}
			if tc.want == "" {
				require.Empty(t, got)
			} else {
				require.Equal(t, []string{tc.want}, got)
			}
		})
	}
}
