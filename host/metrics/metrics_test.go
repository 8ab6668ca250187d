package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func TestErrorCodeCardinalityIsBounded(t *testing.T) {
	m := New()
	for i := range MaxCodesPerScanner + 10 {
		m.Errors("s", scannerapi.ErrLua, fmt.Sprintf("code_%d", i), 1)
	}
	m.Errors("s", scannerapi.ErrLua, "Weird Code!", 1)
	m.Errors("s", "made-up-class", "x", 1)
	// MaxCodesPerScanner distinct codes plus "other" for lua, plus one
	// series of the unknown class mapped to "other" (its code too: the
	// scanner's code budget is spent).
	assert.Equal(t, MaxCodesPerScanner+2, testutil.CollectAndCount(m.errors))
	assert.Equal(t, float64(11), testutil.ToFloat64(m.errors.WithLabelValues("s", "lua", "other")))
	assert.Equal(t, float64(1), testutil.ToFloat64(m.errors.WithLabelValues("s", "other", "other")))
	// Another scanner has its own budget.
	m.Errors("t", scannerapi.ErrTransport, "rpc_timeout", 2)
	assert.Equal(t, float64(2), testutil.ToFloat64(m.errors.WithLabelValues("t", "transport", "rpc_timeout")))
}

func TestSanitizeCode(t *testing.T) {
	assert.Equal(t, "execution_not_active", SanitizeCode("execution_not_active"))
	assert.Equal(t, "wrongtype", SanitizeCode("WRONGTYPE"))
	assert.Equal(t, "other", SanitizeCode("has space"))
	assert.Equal(t, "", SanitizeCode(""))
}

func TestNamesAndUnits(t *testing.T) {
	m := New()
	m.Cycle("s", 20*time.Millisecond)
	m.Items("s", 3, 1)
	m.Backlog("s", 7)
	m.Lag("s", 1500*time.Millisecond)
	m.Restart("s", "exited")
	m.RPC("s", "scan_partition", time.Millisecond)
	m.CallbackCommands("s", 4)
	m.CallbackRefused("s", "key_prefix")
	mfs, err := m.Registry.Gather()
	assert.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{
		"ffscan_scanner_cycle_duration_seconds", "ffscan_scanner_cycles_total",
		"ffscan_scanner_items_processed_total", "ffscan_scanner_items_skipped_total",
		"ffscan_scanner_backlog", "ffscan_scanner_oldest_due_lag_seconds",
		"ffscan_plugin_restarts_total", "ffscan_plugin_rpc_duration_seconds",
		"ffscan_callback_commands_total", "ffscan_callback_refused_total",
	} {
		assert.True(t, names[n], n)
	}
	assert.Equal(t, 1.5, testutil.ToFloat64(m.lag.WithLabelValues("s")))
}

// Every class a scanner can report is exported under its own name:
// docs/operations.md alerts on "invalid", so it must not turn into "other".
func TestEveryClassIsExported(t *testing.T) {
	m := New()
	for _, c := range []scannerapi.ErrorClass{scannerapi.ErrTransport, scannerapi.ErrLua, scannerapi.ErrRefused, scannerapi.ErrServer, scannerapi.ErrInvalid} {
		m.Errors("s", c, "x", 1)
		assert.Equal(t, float64(1), testutil.ToFloat64(m.errors.WithLabelValues("s", string(c), "x")), c)
	}
}
