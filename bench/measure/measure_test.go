package measure

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDistribution(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	d := Distribution(s)
	assert.Equal(t, 100, d.N)
	assert.Equal(t, time.Millisecond, d.Min)
	assert.Equal(t, 50*time.Millisecond, d.P50)
	assert.Equal(t, 90*time.Millisecond, d.P90)
	assert.Equal(t, 99*time.Millisecond, d.P99)
	assert.Equal(t, 100*time.Millisecond, d.Max)
	assert.Equal(t, 50500*time.Microsecond, d.Mean)
	assert.Equal(t, 100*time.Millisecond, s[0], "the sample is not reordered")
	assert.Equal(t, "no samples", Distribution(nil).String())
}

func TestParseCommandStatsAndCPU(t *testing.T) {
	stats := ParseCommandStats("# Commandstats\r\ncmdstat_zrange:calls=512,usec=900,usec_per_call=1.76,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_time:calls=2,usec=1,usec_per_call=0.50\r\n")
	assert.Equal(t, map[string]int64{"zrange": 512, "time": 2}, stats)
	cpu := ParseServerCPU("# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.0\r\n")
	assert.Equal(t, 3750*time.Millisecond, cpu)
}

func TestParseMetricsSum(t *testing.T) {
	m := ParseMetrics(`# HELP x
ffscan_plugin_rpc_duration_seconds_count{method="scan_partition",scanner="lease_expiry"} 12
ffscan_plugin_rpc_duration_seconds_count{method="sample_backlog",scanner="lease_expiry"} 3
ffscan_plugin_rpc_duration_seconds_count{method="scan_partition",scanner="other"} 100
ffscan_callback_commands_total{scanner="lease_expiry"} 7
`)
	assert.Equal(t, 115.0, m.Sum("ffscan_plugin_rpc_duration_seconds_count"))
	assert.Equal(t, 15.0, m.Sum("ffscan_plugin_rpc_duration_seconds_count", `scanner="lease_expiry"`))
	assert.Equal(t, 7.0, m.Sum("ffscan_callback_commands_total"))
	assert.Equal(t, 0.0, m.Sum("missing"))
}

func TestProcAndSystemCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	_, err := ProcCPU(os.Getpid())
	require.NoError(t, err)
	_, err = SystemCPU()
	require.NoError(t, err)
	_, err = ProcCPU(-1)
	assert.Error(t, err)
}
