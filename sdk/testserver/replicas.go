package testserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// ClusterOptions shape a cluster for fault tests.
type ClusterOptions struct {
	Masters int
	// Replicas per master. Replicas authenticate to their master as a
	// user of their own (replUser), so a test can cut one replication
	// link without touching any other client (CutReplication).
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a silent master takes
	// to be declared failed. 0 means 5 s: with 1 s, a node that a busy
	// machine left unscheduled for a second (a race-built test binary
	// and two CPU burners beside six servers on two cores) was declared
	// failed, and the cluster answered CLUSTERDOWN while a test seeded
	// it, before anything was killed.
	NodeTimeout time.Duration
}

// DefaultNodeTimeout is ClusterOptions.NodeTimeout's default.
const DefaultNodeTimeout = 5 * time.Second

// The replication user every node knows; a replica logs in to its master
// with it.
const (
	replUser = "ffscan-repl"
	replPass = "ffscan-repl-secret"
)

// StartClusterWith starts a cluster of o.Masters masters holding the
// 16384 slots in contiguous ranges, each with o.Replicas replicas in sync,
// and waits until every node reports cluster_state:ok. Nodes lists the
// masters first (Nodes[i] holds the i-th slot range), then the replicas
// (Nodes[o.Masters+i*o.Replicas+j] is replica j of master i). A replica
// takes over whatever the age of its data (cluster-replica-validity-factor
// 0), so a test can fail over to a replica that missed writes.
func StartClusterWith(o ClusterOptions) (*Cluster, error) {
	if o.Masters < 1 {
		return nil, fmt.Errorf("testserver: a cluster needs at least one master")
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = DefaultNodeTimeout
	}
	c := &Cluster{}
	fail := func(err error) (*Cluster, error) { c.Stop(); return nil, err }
	total := o.Masters * (1 + o.Replicas)
	for i := 0; i < total; i++ {
		n, err := Start(clusterNode(), WithArgs("--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
			"--cluster-replica-validity-factor", "0",
			"--masteruser", replUser, "--masterauth", replPass))
		if err != nil {
			return fail(err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if err := nodeDo(ctx, n.Addr, "ACL", "SETUSER", replUser, "on", ">"+replPass, "~*", "&*", "+@all"); err != nil {
			return fail(fmt.Errorf("testserver: replication user on %s: %w", n.Addr, err))
		}
	}
	per := 16384 / o.Masters
	for i, n := range c.Nodes[:o.Masters] {
		lo, hi := i*per, (i+1)*per-1
		if i == o.Masters-1 {
			hi = 16383
		}
		if err := nodeDo(ctx, n.Addr, "CLUSTER", "ADDSLOTSRANGE", fmt.Sprint(lo), fmt.Sprint(hi)); err != nil {
			return fail(fmt.Errorf("testserver: assign slots %d-%d to %s: %w", lo, hi, n.Addr, err))
		}
	}
	for _, n := range c.Nodes[1:] {
		if err := nodeDo(ctx, n.Addr, "CLUSTER", "MEET", "127.0.0.1", fmt.Sprint(c.Nodes[0].Port), fmt.Sprint(c.Nodes[0].BusPort)); err != nil {
			return fail(fmt.Errorf("testserver: CLUSTER MEET from %s: %w", n.Addr, err))
		}
	}
	for _, n := range c.Nodes {
		if err := waitClusterOK(ctx, n.Addr, total); err != nil {
			return fail(err)
		}
	}
	for i := 0; i < o.Masters; i++ {
		id, err := nodeString(ctx, c.Nodes[i].Addr, "CLUSTER", "MYID")
		if err != nil {
			return fail(err)
		}
		for j := 0; j < o.Replicas; j++ {
			r := c.Nodes[o.Masters+i*o.Replicas+j]
			// A node learns of the master through gossip; REPLICATE
			// fails until it has.
			if err := retry(ctx, func() error { return nodeDo(ctx, r.Addr, "CLUSTER", "REPLICATE", id) }); err != nil {
				return fail(fmt.Errorf("testserver: %s REPLICATE %s: %w", r.Addr, c.Nodes[i].Addr, err))
			}
		}
	}
	for _, r := range c.Nodes[o.Masters:] {
		if err := waitLink(ctx, r.Addr, "up"); err != nil {
			return fail(err)
		}
	}
	for _, n := range c.Nodes {
		if err := waitClusterOK(ctx, n.Addr, total); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// NewClusterWith starts a cluster for one test and stops it when the test
// ends.
func NewClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	c, err := StartClusterWith(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Live lists the nodes that were not killed.
func (c *Cluster) Live() []*Server {
	var out []*Server
	for _, n := range c.Nodes {
		if !n.killed() {
			out = append(out, n)
		}
	}
	return out
}

// MasterOf returns the live node that serves key's slot as master, as a
// live node's CLUSTER SHARDS reports it.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	for _, n := range c.Live() {
		cl, err := direct(n.Addr)
		if err != nil {
			continue
		}
		slot, err := cl.Do(ctx, cl.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			cl.Close()
			continue
		}
		slots, err := cl.Do(ctx, cl.B().ClusterSlots().Build()).ToArray()
		cl.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			f, err := s.ToArray()
			if err != nil || len(f) < 3 {
				continue
			}
			lo, _ := f[0].AsInt64()
			hi, _ := f[1].AsInt64()
			if slot < lo || slot > hi {
				continue
			}
			m, err := f[2].ToArray()
			if err != nil || len(m) < 2 {
				continue
			}
			port, _ := m[1].AsInt64()
			for _, cand := range c.Nodes {
				if cand.Port == int(port) && !cand.killed() {
					return cand, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("testserver: no live node knows the master of %q", key)
}

// ReplicasOf lists the live replicas of master m.
func (c *Cluster) ReplicasOf(ctx context.Context, m *Server) ([]*Server, error) {
	info, err := nodeString(ctx, m.Addr, "INFO", "replication")
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "port=") {
			continue
		}
		_, rest, _ := strings.Cut(line, "port=")
		p, _, _ := strings.Cut(rest, ",")
		for _, n := range c.Nodes {
			if strconv.Itoa(n.Port) == p && !n.killed() {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// CutReplication stops master m from feeding its replicas: their user is
// disabled on m and their links are killed, so writes to m from now on
// reach no replica. It returns once every replica reports its link down.
func (c *Cluster) CutReplication(ctx context.Context, m *Server) error {
	reps, err := c.ReplicasOf(ctx, m)
	if err != nil {
		return err
	}
	if len(reps) == 0 {
		return fmt.Errorf("testserver: %s has no replica", m.Addr)
	}
	if err := nodeDo(ctx, m.Addr, "ACL", "SETUSER", replUser, "off"); err != nil {
		return err
	}
	if err := nodeDo(ctx, m.Addr, "CLIENT", "KILL", "USER", replUser); err != nil {
		return err
	}
	for _, r := range reps {
		if err := waitLink(ctx, r.Addr, "down"); err != nil {
			return err
		}
	}
	return nil
}

// WaitServed waits until every live node reports cluster_state:ok and
// the master of key is a live node, that is until a failover of key's
// master completed; it returns the new master.
func (c *Cluster) WaitServed(ctx context.Context, key string) (*Server, error) {
	for {
		m, err := c.MasterOf(ctx, key)
		if err == nil {
			ok := true
			for _, n := range c.Live() {
				info, err := nodeString(ctx, n.Addr, "CLUSTER", "INFO")
				if err != nil || !strings.Contains(info, "cluster_state:ok") {
					ok = false
					break
				}
			}
			if ok {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserver: %q not served by a live master: %w", key, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Direct opens a client to one node only (no redirection), closed when
// the test ends.
func (s *Server) Direct(t testing.TB) valkey.Client {
	t.Helper()
	cl, err := direct(s.Addr)
	if err != nil {
		t.Fatalf("testserver: connect to %s: %v", s.Addr, err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func direct(addr string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true, DisableRetry: true})
}

func nodeString(ctx context.Context, addr string, cmd ...string) (string, error) {
	cl, err := direct(addr)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	return cl.Do(ctx, cl.B().Arbitrary(cmd...).Build()).ToString()
}

func waitLink(ctx context.Context, addr, state string) error {
	last := ""
	for {
		info, err := nodeString(ctx, addr, "INFO", "replication")
		if err == nil {
			last = info
			if strings.Contains(info, "master_link_status:"+state) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: replica %s never reported its link %s; last INFO replication: %s", addr, state, strings.ReplaceAll(strings.TrimSpace(last), "\r\n", " "))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MigrateSlot moves slot from master `from` to master `to` the way
// resharding tools do: IMPORTING/MIGRATING, keys moved with MIGRATE in
// batches of batch keys (so clients meet ASK and TRYAGAIN in between),
// then the slot assigned to `to` on every live master.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, from, to *Server, batch int) error {
	fromID, err := nodeString(ctx, from.Addr, "CLUSTER", "MYID")
	if err != nil {
		return err
	}
	toID, err := nodeString(ctx, to.Addr, "CLUSTER", "MYID")
	if err != nil {
		return err
	}
	s := strconv.Itoa(slot)
	if err := nodeDo(ctx, to.Addr, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("testserver: IMPORTING %s on %s: %w", s, to.Addr, err)
	}
	if err := nodeDo(ctx, from.Addr, "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return fmt.Errorf("testserver: MIGRATING %s on %s: %w", s, from.Addr, err)
	}
	cl, err := direct(from.Addr)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		ks, err := cl.Do(ctx, cl.B().ClusterGetkeysinslot().Slot(int64(slot)).Count(int64(batch)).Build()).AsStrSlice()
		if err != nil {
			return fmt.Errorf("testserver: GETKEYSINSLOT %s: %w", s, err)
		}
		if len(ks) == 0 {
			break
		}
		args := append([]string{"127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "KEYS"}, ks...)
		cmd := cl.B().Arbitrary("MIGRATE").Args(args...).Build()
		if err := cl.Do(ctx, cmd).Error(); err != nil {
			return fmt.Errorf("testserver: MIGRATE %d keys of slot %s: %w", len(ks), s, err)
		}
	}
	for _, n := range c.Live() {
		role, err := nodeString(ctx, n.Addr, "INFO", "replication")
		if err != nil || !strings.Contains(role, "role:master") {
			continue
		}
		if err := nodeDo(ctx, n.Addr, "CLUSTER", "SETSLOT", s, "NODE", toID); err != nil {
			return fmt.Errorf("testserver: SETSLOT %s NODE on %s: %w", s, n.Addr, err)
		}
	}
	return nil
}
