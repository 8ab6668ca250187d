package testserver

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ffscan/ffscan/keys"
)

// The package stays free of assertion libraries: it is part of the SDK
// module, whose dependency budget counts for every plugin author.

func TestServerStartsAndCleansUp(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("ff:k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	v, err := c.Do(ctx, c.B().Get().Key("ff:k").Build()).ToString()
	if err != nil || v != "v" {
		t.Fatalf("GET ff:k = %q, %v; want v", v, err)
	}
	s.Flush(t)
	n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
	if err != nil || n != 0 {
		t.Fatalf("DBSIZE after Flush = %d, %v; want 0", n, err)
	}

	pid := s.cmd.Process.Pid
	s.Stop()
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("server directory %s still there after Stop (%v)", s.Dir, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server process %d still there after Stop (kill 0: %v)", pid, err)
	}
	s.Stop() // idempotent
}

func TestClusterRoutesAcrossMasters(t *testing.T) {
	cl := NewCluster(t, 3)
	c := cl.Client(t)
	ctx := context.Background()
	// Keys of 64 partitions spread over all three masters.
	for i := 0; i < 64; i++ {
		key := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: uint16(i)}).LeaseExpiry()
		if err := c.Do(ctx, c.B().Zadd().Key(key).ScoreMember().ScoreMember(1, "x").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(0)
	for i, n := range cl.Nodes {
		nc := n.Client(t)
		k, err := nc.Do(ctx, nc.B().Dbsize().Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if k <= 0 {
			t.Errorf("master %d holds no partition", i)
		}
		total += k
	}
	if total != 64 {
		t.Errorf("the masters hold %d keys together, want 64", total)
	}
}

// A cluster with replicas fails over when a master dies, and a replica cut
// off before the master's last writes takes over without them.
func TestClusterFailsOverToAReplicaThatMissedWrites(t *testing.T) {
	t.Parallel()
	c := NewClusterWith(t, ClusterOptions{Masters: 3, Replicas: 1})
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Nodes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const key = "{fp:1}:k"
	m, err := c.MasterOf(ctx, key)
	must(err)
	mc := m.Direct(t)
	must(mc.Do(ctx, mc.B().Set().Key(key).Value("replicated").Build()).Error())
	n, err := mc.Do(ctx, mc.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64()
	must(err)
	if n != 1 {
		t.Fatalf("WAIT: %d replicas acknowledged", n)
	}
	must(c.CutReplication(ctx, m))
	must(mc.Do(ctx, mc.B().Set().Key(key).Value("lost").Build()).Error())
	m.Kill()
	nm, err := c.WaitServed(ctx, key)
	must(err)
	if nm.Port == m.Port {
		t.Fatal("the killed master still serves the slot")
	}
	cl := c.Client(t)
	v, err := cl.Do(ctx, cl.B().Get().Key(key).Build()).ToString()
	must(err)
	if v != "replicated" {
		t.Fatalf("GET after failover = %q, want the value from before the cut", v)
	}
}
