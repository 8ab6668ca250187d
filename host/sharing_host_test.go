package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// Three hosts on one keyspace divide the partitions (each owned by
// exactly one host) and handle every item; when one stops, the others
// take its partitions over and handle what comes next.
func TestHostsShareTheKeyspace(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	var hosts []*Host
	var stops []func() time.Duration
	for i := 0; i < 3; i++ {
		h, stop := running(t, testConfig(t, srv.Addr, config.Scanner{}))
		hosts = append(hosts, h)
		stops = append(stops, stop)
	}
	all := make([]uint16, 16)
	for i := range all {
		all[i] = uint16(i)
	}
	// Wait (on the hosts' own reports) until the three have divided the
	// flow partitions among themselves.
	shared := func(hs []*Host) bool {
		total := 0
		for _, h := range hs {
			st := h.Status().Sharing
			if st == nil || len(st.Hosts) != len(hs) || st.Owned["flow"] == 0 {
				return false
			}
			total += st.Owned["flow"]
		}
		return total == 16
	}
	// (Checked at every change of the first host: its sharing ticks and
	// its cycles.)
	waitFor(t, hosts[0], 30*time.Second, "the partitions shared", func() bool { return shared(hosts) })
	// Each ownership key names one of the three hosts.
	ids := map[string]bool{}
	for _, h := range hosts {
		ids[h.Status().Sharing.HostID] = true
	}
	flowParts := keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}.Partitions(keys.FamilyFlow)
	for _, p := range flowParts {
		v, err := c.Do(context.Background(), c.B().Hget().Key(sharing.OwnersKey).Field(sharing.OwnerField(p)).Build()).ToString()
		require.NoError(t, err)
		owner, _, _ := strings.Cut(v, "|")
		assert.True(t, ids[owner], "partition %d owned by %q", p.Index, owner)
	}
	want := addWork(t, c, all, 5)
	waitFor(t, hosts[0], 30*time.Second, "every item handled by the host owning its partition", func() bool { return allDone(c, all, want) })

	// One host stops (it gives its partitions up); the other two cover
	// all of them and handle new work everywhere.
	stops[2]()
	waitFor(t, hosts[0], 30*time.Second, "the partitions shared by the two left", func() bool { return shared(hosts[:2]) })
	for _, p := range all {
		require.NoError(t, c.Do(context.Background(), c.B().Del().Key(doneKey(p)).Build()).Error())
	}
	want = addWork(t, c, all, 3)
	waitFor(t, hosts[0], 30*time.Second, "new work handled everywhere", func() bool { return allDone(c, all, want) })
}
