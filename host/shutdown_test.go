package host

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// Every service the host holds is stopped by a phase of the shutdown, and
// every phase ends within the budget.
func TestShutdownPhasesStopEveryServiceWithinTheBudget(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.HTTP.Listen = "127.0.0.1:0"
	h, err := Boot(context.Background(), cfg, hclog.NewNullLogger())
	require.NoError(t, err)
	t.Cleanup(h.Close)

	stopped := map[service.Service]bool{}
	prevHard := 0
	for i, ph := range h.shutdownPhases() {
		assert.LessOrEqual(t, ph.end, ph.hard, "phase %d ends before its hard stop", i)
		assert.LessOrEqual(t, ph.hard, 100, "phase %d ends within the budget", i)
		assert.LessOrEqual(t, prevHard, ph.hard, "phase %d does not end before the one before it", i)
		prevHard = ph.hard
		for _, s := range ph.svcs {
			if reflect.TypeOf(s).Comparable() {
				stopped[s] = true
			}
		}
	}
	var held []string
	v := reflect.ValueOf(h).Elem()
	svcType := reflect.TypeFor[service.Service]()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.Type.Implements(svcType) || v.Field(i).IsNil() {
			continue
		}
		held = append(held, f.Name)
		s := reflect.NewAt(f.Type, v.Field(i).Addr().UnsafePointer()).Elem().Interface().(service.Service)
		assert.True(t, stopped[s], "the shutdown stops the host's %s (%s)", f.Name, f.Type)
	}
	// The services a host with Valkey and HTTP holds.
	assert.ElementsMatch(t, []string{"share", "events", "lanes", "censusCtl", "library", "units", "listeners", "files", "http", "audit"}, held)
}

// A running host's shutdown returns within its budget and leaves nothing
// running: the endpoints closed, this host's share of the partitions
// given up (the others take it at once).
func TestShutdownLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	cfg := testConfig(t, srv.Addr, config.Scanner{})
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	h, stop := running(t, cfg)
	waitFor(t, h, 30*time.Second, "the scanner running and the partitions owned", func() bool {
		st := h.Status().Sharing
		return scannerStatus(h).State == "running" && st != nil && st.Owned["flow"] == 16
	})
	addr := h.http.Addr()
	id := h.Status().Sharing.HostID

	took := stop()
	// The margin is for a busy machine: the alternative is a stop
	// outside the budget, which has none.
	assert.Less(t, took, cfg.ShutdownTimeout+5*time.Second, "Run returned within the shutdown budget")
	_, err := net.Dial("tcp", addr)
	assert.Error(t, err, "nothing listens after the shutdown")
	assert.Empty(t, h.share.Status().Partitions, "this host owns no partition after the shutdown")
	owners, err := c.Do(context.Background(), c.B().Hgetall().Key(sharing.OwnersKey).Build()).AsStrMap()
	require.NoError(t, err)
	for field, owner := range owners {
		assert.False(t, strings.HasPrefix(owner, id+"|"), "partition %s still names this host", field)
	}
}
