package host

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/depexec"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/flowtest"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// bundledPlugins names the binary of every scanner shipped with ffscan
// (configs/ffscan.yaml lists them; the test checks the two agree).
var bundledPlugins = map[string]string{
	"lease_expiry":           "leaseexpiry",
	"attempt_timeout":        "timers",
	"execution_deadline":     "timers",
	"suspension_timeout":     "timers",
	"pending_wp_expiry":      "timers",
	"delayed_promoter":       "timers",
	"cancel_reconciler":      "cancelreconciler",
	"dependency_reconciler":  "depreconciler",
	"retention_trimmer":      "retention",
	"budget_reset":           "budget",
	"budget_reconciler":      "budget",
	"edge_cancel_dispatcher": "edgecancel",
	"edge_cancel_reconciler": "edgecancel",
	"unblock":                "unblock",
	"quota_reconciler":       "quota",
	"flow_projector":         "observers",
	"index_reconciler":       "observers",
}

// wouldActPlanted is how many distinct writes (command and keys) each
// scanner holds back over the planted keyspace (plantForEveryScanner):
// the test's proof that it meets something due for every scanner.
var wouldActPlanted = map[string]int{
	"lease_expiry":           3, // two lapsed leases marked, the garbage member removed
	"attempt_timeout":        1,
	"execution_deadline":     1,
	"suspension_timeout":     1,
	"pending_wp_expiry":      1,
	"delayed_promoter":       1,
	"cancel_reconciler":      4, // each member of the cancelled flow
	"dependency_reconciler":  1,
	"retention_trimmer":      6, // both deletes and both index entries of each expired execution
	"budget_reset":           2,
	"budget_reconciler":      4, // breach marked, breach cleared, orphan pruned (two indexes)
	"edge_cancel_dispatcher": 4, // the two siblings of each pending group
	"edge_cancel_reconciler": 2, // each pending group
	"unblock":                3, // route, budget, quota
	"quota_reconciler":       6, // three windows trimmed, the orphan pruned, the counter and admitted set corrected
	"flow_projector":         4, // each flow's summary
	"index_reconciler":       0, // detect only: it reports, never writes
}

// Issue 41: every bundled scanner, all running in shadow over a planted
// keyspace (lapsed leases, attempts, deadlines, suspensions and pending
// waitpoints, due delays, a cancelled flow, missed dependency and
// sibling-cancel pushes, old terminal executions, due and breached
// budgets, leaked quota slots, parked executions whose block cleared,
// flows to summarise, an execution missing from its index), changes
// nothing: for two whole cycles of every scanner the server runs no
// write of theirs (MONITOR), and every key is as it was (its DUMP, and
// its expiry to the ms). And what each scanner held back is what it does:
// the set of its held-back writes (command, keys, argument count) is the
// set of writes the same scanner then runs in act mode, alone, over the
// same keyspace restored from the DUMPs (seen through MONITOR), but for
// the follow-on writes of a chain whose first write was held back
// (plantedState.followOns).
//
// What is not compared: the host's own keys and writes (its sharing
// coordination, the partition counts and lanes it records); and the
// bytes of a hash or set the server keeps in a hash table, whose DUMP
// follows the table's incremental rehash that plain reads advance (their
// content is compared instead). The completion listener is off: it is no
// scanner, and would act on what an acting scanner ends.
func TestShadowAllBundledScannersChangeNothingAndPredictTheirWrites(t *testing.T) {
	t.Parallel()
	names := sortedKeys(bundledPlugins)
	shipped, err := config.Load(config.Sources{File: filepath.Join("..", "configs", "ffscan.yaml"), Environ: []string{}})
	require.NoError(t, err)
	require.ElementsMatch(t, shipped.Enabled(), names, "the bundled scanners are configs/ffscan.yaml's")

	srv := testserver.New(t)
	c := srv.Client(t)
	parts := keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	planted := plantForEveryScanner(t, c, parts)
	before := snapshotKeyspace(t, c)

	// Shadow: every scanner, two whole cycles each.
	cfg := bundledConfig(t, srv.Addr, parts, planted.lanes)
	wc := newWriteClassifier(t, c)
	mon := startMonitor(t, srv.Addr)
	h, _ := running(t, withScanners(cfg, names, config.ModeShadow))
	waitFor(t, h, 3*time.Minute, "every scanner finishes two whole cycles in shadow", func() bool {
		return wholeCyclesAtLeast(h, 2, names...)
	})
	assert.Empty(t, wc.writes(t, mon.stop(t, c)), "writes the server ran while every scanner was in shadow")
	requireSameKeyspace(t, before, snapshotKeyspace(t, c))

	status := map[string]httpapi.ScannerStatus{}
	for _, s := range h.Status().Scanners {
		status[s.Name] = s
	}
	wouldAct := map[string][]string{}
	for _, name := range names {
		l, ok := h.shadows.Lookup(name)
		require.True(t, ok, name)
		snap := l.Snapshot(0)
		wouldAct[name] = shadowItems(snap)
		st := status[name]
		assert.Equal(t, config.ModeShadow, st.Mode, name)
		assert.Len(t, wouldAct[name], wouldActPlanted[name], "%s held back: %v", name, wouldAct[name])
		t.Logf("%s: %d writes held back, %d distinct, in %d cycles (processed %d, errors %d)",
			name, snap.WouldAct, len(wouldAct[name]), st.Cycle, st.Processed, st.Errors)
	}
	assert.Positive(t, status["index_reconciler"].Processed, "index_reconciler reports the execution missing from its index")

	// Act: one scanner at a time, alone, each over the planted keyspace
	// again, its writes seen through MONITOR.
	followOns := planted.followOns(parts)
	for _, name := range names {
		mustReload(t, h, withScanners(cfg, nil, ""))
		restoreKeyspace(t, c, before)
		mon := startMonitor(t, srv.Addr)
		mustReload(t, h, withScanners(cfg, []string{name}, config.ModeAct))
		waitFor(t, h, 2*time.Minute, name+" finishes two whole cycles in act", func() bool { return wholeCyclesAtLeast(h, 2, name) })
		mustReload(t, h, withScanners(cfg, nil, ""))
		acted := wc.writes(t, mon.stop(t, c))

		want := map[string]bool{}
		for _, w := range wouldAct[name] {
			want[w] = true
		}
		for _, f := range followOns[name] {
			// The carve-out is exact: a follow-on shadow now records
			// is no longer one.
			assert.False(t, want[f], "%s: shadow records %s: drop it from followOns", name, f)
			want[f] = true
		}
		if len(followOns[name]) > 0 {
			t.Logf("%s: act ran %d follow-on writes of held-back FCALLs that shadow does not record: %v", name, len(followOns[name]), followOns[name])
		}
		assert.Equal(t, sortedKeys(want), acted, "%s: the writes shadow held back (with their follow-ons), and those act ran", name)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// bundledConfig is a host configuration with a plugin directory holding
// every bundled binary, and no scanner yet.
func bundledConfig(t *testing.T, addr string, parts keys.PartitionConfig, lanes []string) *config.Config {
	t.Helper()
	cfg := testConfig(t, addr, config.Scanner{})
	cfg.Partitions = parts
	cfg.Lanes = lanes
	// The completion listener is no scanner: it would resolve the
	// dependents of what an acting scanner ends, writes of its own among
	// the scanner's.
	cfg.Completions.Enabled = false
	cfg.PluginDir = ownPluginDir(t)
	built := map[string]string{"leaseexpiry": pluginDir, "timers": pluginDir, "unblock": variantDir,
		"observers": variantDir, "retention": variantDir, "depreconciler": variantDir}
	for _, bin := range bundledPlugins {
		if _, err := os.Stat(filepath.Join(cfg.PluginDir, bin)); err == nil {
			continue
		}
		if dir, ok := built[bin]; ok {
			copyFile(t, filepath.Join(dir, bin), filepath.Join(cfg.PluginDir, bin))
			continue
		}
		scannertest.InstallPlugin(t, "github.com/ffscan/ffscan/plugins/"+bin+"/cmd/"+bin, cfg.PluginDir, bin)
	}
	cfg.Scanners = map[string]config.Scanner{}
	return cfg
}

// scanInterval is every scanner's interval here: short, so that two
// cycles come soon, and long enough for 17 plugins on a busy machine.
const scanInterval = 300 * time.Millisecond

// withScanners is cfg with the named scanners enabled in mode.
func withScanners(cfg *config.Config, names []string, mode string) *config.Config {
	next := *cfg
	next.Scanners = map[string]config.Scanner{}
	for _, n := range names {
		sc := config.Scanner{Enabled: true, Plugin: bundledPlugins[n], Interval: scanInterval, Mode: mode, Options: map[string]string{}}
		if n == "retention_trimmer" {
			// Executions that ended two hours ago are due, those just
			// ended are not.
			sc.Options = map[string]string{"default_retention": "1h", "min_retention": "1h"}
		}
		next.Scanners[n] = sc
	}
	return &next
}

func mustReload(t *testing.T, h *Host, cfg *config.Config) {
	t.Helper()
	res, err := h.Reload(context.Background(), cfg, "test")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	for _, p := range res.Plugins {
		require.Empty(t, p.Error, "%+v", p)
	}
}

// wholeCyclesAtLeast reports whether each named scanner finished n
// cycles in which every partition was read and scanned. Its runner counts
// the cycles it began, those that could not run (scanner unavailable, no
// server time), the partitions whose fetch or call failed and the calls
// its dispatch stopped waiting for; each of the last two spoils at most
// one cycle, so what is left is a lower bound on the whole cycles.
func wholeCyclesAtLeast(h *Host, n int64, names ...string) bool {
	views := h.units.Views()
	for _, name := range names {
		v, ok := views[name]
		if !ok {
			return false
		}
		st := v.Unit.Runner().Status()
		if int64(st.Cycle)-st.CycleErrors-st.Failed-st.Late < n {
			return false
		}
	}
	return true
}

// writeItem is one write as its command, its keys and how many other
// arguments it has, in the shadow log's shape: at most 8 keys, the rest
// counted.
func writeItem(command string, ks []string, args int) string {
	more := 0
	if len(ks) > 8 {
		ks, more = ks[:8], len(ks)-8
	}
	return fmt.Sprintf("%s %s (+%d keys) %d args", command, strings.Join(ks, " "), more, args)
}

// shadowItems are the distinct writes a shadow log holds.
func shadowItems(s shadow.Snapshot) []string {
	set := map[string]bool{}
	for _, it := range s.Latest {
		ks := append([]string(nil), it.Keys...)
		for range it.MoreKeys {
			ks = append(ks, "")
		}
		set[writeItem(it.Command, ks, it.Args)] = true
	}
	return sortedKeys(set)
}

// ----- the keyspace -----

// keyState is one key as DUMP, OBJECT ENCODING and PEXPIRETIME give it,
// and, for a key the server keeps in a hash table, its content.
type keyState struct {
	dump     string
	encoding string
	expireAt int64 // ms; -1: no expiry
	content  string
}

// hostOwned reports whether key is one of the host's own, outside
// FlowFabric's layout: its sharing coordination (ffscan:{ffscan}:*),
// which it renews every tick whatever its scanners' modes.
func hostOwned(key string) bool {
	return strings.HasPrefix(key, "ffscan:")
}

// hostBookkeeping reports whether a write's keys are all the host's own
// bookkeeping, which no scanner runs: its own keys, and the partition
// counts and lanes it records at boot and on each lane refresh (planted
// already as the host writes them, so that its writes there change
// nothing).
func hostBookkeeping(ks []string) bool {
	for _, k := range ks {
		if !hostOwned(k) && k != keys.LanesIndex && k != keys.ConfigPartitions {
			return false
		}
	}
	return len(ks) > 0
}

// snapshotKeyspace DUMPs every key (SCAN 0 MATCH *) but the host's own.
// A hash or a set the server keeps in a hash table DUMPs in the table's
// order, which a plain read changes (each lookup advances an incremental
// rehash): for those the content is kept too, sorted.
func snapshotKeyspace(t *testing.T, c valkey.Client) map[string]keyState {
	t.Helper()
	ctx := context.Background()
	out := map[string]keyState{}
	var cur uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cur).Match("*").Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		for _, k := range e.Elements {
			if hostOwned(k) {
				continue
			}
			var st keyState
			st.dump, err = c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
			require.NoError(t, err, k)
			st.expireAt, err = c.Do(ctx, c.B().Arbitrary("PEXPIRETIME").Keys(k).Build()).AsInt64()
			require.NoError(t, err, k)
			st.encoding, err = c.Do(ctx, c.B().ObjectEncoding().Key(k).Build()).ToString()
			require.NoError(t, err, k)
			if st.encoding == "hashtable" {
				typ, err := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
				require.NoError(t, err, k)
				var items []string
				switch typ {
				case "hash":
					m, err := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
					require.NoError(t, err, k)
					for f, v := range m {
						items = append(items, strconv.Quote(f)+"="+strconv.Quote(v))
					}
				case "set":
					items, err = c.Do(ctx, c.B().Smembers().Key(k).Build()).AsStrSlice()
					require.NoError(t, err, k)
				default:
					t.Fatalf("%s: a %s kept in a hash table", k, typ)
				}
				sort.Strings(items)
				st.content = typ + ":" + strings.Join(items, ",")
			}
			out[k] = st
		}
		if e.Cursor == 0 {
			return out
		}
		cur = e.Cursor
	}
}

// restoreKeyspace makes the keyspace snap again: FLUSHALL, then RESTORE
// every key with its expiry time.
func restoreKeyspace(t *testing.T, c valkey.Client, snap map[string]keyState) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().Flushall().Sync().Build()).Error())
	for k, st := range snap {
		ttl := "0"
		if st.expireAt > 0 {
			ttl = strconv.FormatInt(st.expireAt, 10)
		}
		require.NoError(t, c.Do(ctx, c.B().Arbitrary("RESTORE").Keys(k).Args(ttl, st.dump, "REPLACE", "ABSTTL").Build()).Error(), k)
	}
	requireSameKeyspace(t, snap, snapshotKeyspace(t, c))
}

// requireSameKeyspace requires every key the same: its DUMP, or for a
// key kept in a hash table its content, and its expiry time to the ms.
func requireSameKeyspace(t *testing.T, want, got map[string]keyState) {
	t.Helper()
	var diff []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diff = append(diff, "gone: "+k)
		case g.encoding != w.encoding:
			diff = append(diff, fmt.Sprintf("encoding changed: %s (%s -> %s)", k, w.encoding, g.encoding))
		case w.encoding == "hashtable" && g.content != w.content:
			diff = append(diff, "content changed: "+k)
		case w.encoding != "hashtable" && g.dump != w.dump:
			diff = append(diff, "DUMP changed: "+k)
		case g.expireAt != w.expireAt:
			diff = append(diff, fmt.Sprintf("expiry changed: %s (%d -> %d)", k, w.expireAt, g.expireAt))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, "new: "+k)
		}
	}
	sort.Strings(diff)
	require.Empty(t, diff, "the keyspace changed (%d keys before, %d after)", len(want), len(got))
}

// ----- MONITOR -----

// monitor is a raw connection in MONITOR mode, collecting the lines.
type monitor struct {
	conn     net.Conn
	sentinel string
	mu       sync.Mutex
	lines    []string
	seen     chan struct{}
	done     chan error
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n"))
	require.NoError(t, err)
	r := bufio.NewReaderSize(conn, 1<<20)
	ok, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", ok)
	m := &monitor{conn: conn, sentinel: "ffscan-test-monitor-end-" + keys.NewUUID().String(), seen: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				m.done <- err
				return
			}
			line = strings.TrimSuffix(line, "\r\n")
			m.mu.Lock()
			m.lines = append(m.lines, line)
			m.mu.Unlock()
			if strings.Contains(line, m.sentinel) {
				close(m.seen)
				return
			}
		}
	}()
	return m
}

// stop sends a sentinel through c (an ECHO, after everything before it in
// the server's order) and returns the lines up to it.
func (m *monitor) stop(t *testing.T, c valkey.Client) []string {
	t.Helper()
	require.NoError(t, c.Do(context.Background(), c.B().Echo().Message(m.sentinel).Build()).Error())
	select {
	case <-m.seen:
	case err := <-m.done:
		t.Fatalf("MONITOR ended before its sentinel: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("MONITOR never showed its sentinel")
	}
	m.conn.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines
}

// parseMonitorLine splits `+<time> [<db> <client>] "ARG" "ARG" ...` into
// the client and the arguments (unquoted as the server quoted them).
func parseMonitorLine(line string) (client string, args []string, ok bool) {
	line = strings.TrimPrefix(line, "+")
	open, end := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
	if open < 0 || end < open {
		return "", nil, false
	}
	client = line[open+1 : end]
	s := line[end+1:]
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		var b strings.Builder
		for i++; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' || i+1 >= len(s) {
				b.WriteByte(s[i])
				continue
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 < len(s) {
					v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
					if err == nil {
						b.WriteByte(byte(v))
						i += 2
						continue
					}
				}
				b.WriteByte('x')
			default:
				b.WriteByte(s[i])
			}
		}
		args = append(args, b.String())
	}
	return client, args, len(args) > 0
}

// writeClassifier tells writes from reads by the server's own word:
// COMMAND INFO's write flag, and for FCALL the library's no-writes flags
// (FUNCTION LIST); it finds a command's keys with COMMAND GETKEYS.
type writeClassifier struct {
	c         valkey.Client
	noWrites  map[string]bool
	write     map[string]bool
	container map[string]bool
}

func newWriteClassifier(t *testing.T, c valkey.Client) *writeClassifier {
	t.Helper()
	ctx := context.Background()
	libs, err := c.Do(ctx, c.B().FunctionList().Build()).ToArray()
	require.NoError(t, err)
	wc := &writeClassifier{c: c, noWrites: map[string]bool{}, write: map[string]bool{}, container: map[string]bool{}}
	for _, l := range libs {
		lib, err := l.AsMap()
		require.NoError(t, err)
		fnsMsg := lib["functions"]
		fns, err := fnsMsg.ToArray()
		require.NoError(t, err)
		for _, f := range fns {
			m, err := f.AsMap()
			require.NoError(t, err)
			nameMsg, flagsMsg := m["name"], m["flags"]
			name, err := nameMsg.ToString()
			require.NoError(t, err)
			flags, err := flagsMsg.AsStrSlice()
			require.NoError(t, err)
			wc.noWrites[name] = slices.Contains(flags, "no-writes")
		}
	}
	require.NotEmpty(t, wc.noWrites)
	return wc
}

// writes are the distinct writes among MONITOR lines, in item form.
// Commands a script ran (client "lua") are its FCALL's own doing and are
// left out, and so are the host's own bookkeeping writes (hostBookkeeping).
func (wc *writeClassifier) writes(t *testing.T, lines []string) []string {
	t.Helper()
	ctx := context.Background()
	set := map[string]bool{}
	for _, line := range lines {
		client, args, ok := parseMonitorLine(line)
		if !ok || strings.HasSuffix(client, " lua") {
			continue
		}
		name := strings.ToUpper(args[0])
		if name == "FCALL" {
			require.GreaterOrEqual(t, len(args), 3, line)
			n, err := strconv.Atoi(args[2])
			require.NoError(t, err, line)
			fn := args[1]
			if n == 0 && (fn == "ff_version" || fn == "ffscan_version") {
				continue // the host's check of the library it loaded
			}
			noWrites, known := wc.noWrites[fn]
			require.True(t, known, "FCALL of a function the server does not list: %s", line)
			if noWrites {
				continue
			}
			require.GreaterOrEqual(t, len(args), 3+n, line)
			set[writeItem("FCALL "+fn, args[3:3+n], len(args)-3-n)] = true
			continue
		}
		if !wc.isWrite(t, args) {
			continue
		}
		ks, err := wc.c.Do(ctx, wc.c.B().Arbitrary("COMMAND", "GETKEYS").Args(args...).Build()).AsStrSlice()
		require.NoError(t, err, line)
		if hostBookkeeping(ks) {
			continue
		}
		set[writeItem(name, ks, len(args)-1-len(ks))] = true
	}
	return sortedKeys(set)
}

// isWrite reports whether a command may write: COMMAND INFO's write flag
// (a subcommand's, for a container command); a script may write.
func (wc *writeClassifier) isWrite(t *testing.T, args []string) bool {
	t.Helper()
	name := strings.ToUpper(args[0])
	switch name {
	case "EVAL", "EVALSHA":
		return true
	case "EVAL_RO", "EVALSHA_RO", "FCALL_RO":
		return false
	}
	cmd := name
	if wc.container[name] && len(args) > 1 {
		cmd = strings.ToLower(name + "|" + args[1])
	}
	if w, ok := wc.write[cmd]; ok {
		return w
	}
	info, err := wc.c.Do(context.Background(), wc.c.B().CommandInfo().CommandName(cmd).Build()).ToArray()
	require.NoError(t, err, cmd)
	require.Len(t, info, 1, cmd)
	desc, err := info[0].ToArray()
	require.NoError(t, err, cmd)
	if len(desc) > 9 && cmd == name {
		if subs, err := desc[9].ToArray(); err == nil && len(subs) > 0 {
			wc.container[name] = true
			return wc.isWrite(t, args)
		}
	}
	flags, err := desc[2].AsStrSlice()
	require.NoError(t, err, cmd)
	wc.write[cmd] = slices.Contains(flags, "write")
	return wc.write[cmd]
}

// ----- the planted state -----

// plantedState is what the planting made that the test names later.
type plantedState struct {
	lanes []string
	// cancelled is the flow cancelled with no grace; races are the flows
	// whose sibling-cancel group is pending (downstream by flow); capped
	// is the quota with a leaked slot; purged are the executions past
	// their retention.
	cancelled keys.FlowID
	races     map[keys.FlowID]keys.ExecutionID
	capped    keys.QuotaID
	purged    []keys.ExecutionID
}

// followOns are the writes an acting scanner makes only after an FCALL
// of its went through, and which shadow therefore never sees: a
// held-back FCALL is answered with a refusal (a function's reply is its
// own), which the plugin takes as that item's failure, so it stops its
// chain there. (A held-back plain write is answered as if it ran, so
// the chains of plain writes, retention's deletes and quota's
// corrections, are recorded whole.) Its shadow records name the first
// write of the chain on the same item; these come after it.
//   - cancel_reconciler acknowledges the flow's member cancels once they
//     are done (ff_ack_cancel_member);
//   - edge_cancel_dispatcher drains a group once its siblings are
//     cancelled (ff_drain_sibling_cancel_group).
func (p plantedState) followOns(parts keys.PartitionConfig) map[string][]string {
	out := map[string][]string{}
	pk := keys.FlowPart(parts.FlowPartition(p.cancelled))
	out["cancel_reconciler"] = []string{writeItem("FCALL ff_ack_cancel_member", []string{keys.Flow(parts, p.cancelled).PendingCancels(), pk.CancelBacklog()}, 2)}
	for fid, d := range p.races {
		out["edge_cancel_dispatcher"] = append(out["edge_cancel_dispatcher"], writeItem("FCALL ff_drain_sibling_cancel_group",
			[]string{keys.FlowPart(parts.FlowPartition(fid)).PendingCancelGroups(), keys.Flow(parts, fid).EdgeGroup(d)}, 2))
	}
	return out
}

// plantForEveryScanner makes, through sdk/client and the library (as
// producers and workers do), something due for every bundled scanner, and
// waits until it is due. Nothing planted changes by itself afterwards:
// every worker is closed (no renewal, no heartbeat), every lease left is
// an hour long or lapsed, and no key expires within the test.
func plantForEveryScanner(t *testing.T, c valkey.Client, parts keys.PartitionConfig) plantedState {
	t.Helper()
	w := scannertest.NewWorld(t, c, client.Options{Partitions: parts, Namespace: "ns"})
	ctx, lib := w.Ctx, w.Lib
	create := func(req client.CreateRequest) keys.ExecutionID {
		t.Helper()
		r, err := w.Client.CreateExecution(ctx, req)
		require.NoError(t, err)
		return r.ID
	}
	var workers []*client.Worker
	worker := func(lane string) *client.Worker {
		wk := w.Worker(client.WorkerOptions{WorkerID: "w", InstanceID: fmt.Sprintf("w-%d", len(workers)), Lanes: []string{lane},
			LeaseTTL: time.Hour})
		workers = append(workers, wk)
		return wk
	}
	claim := func(lane string, want keys.ExecutionID) *client.Task {
		t.Helper()
		task := w.Claim(worker(lane))
		require.Equal(t, want, task.ID())
		return task
	}
	require.NoError(t, w.Client.RotateWaitpointSecret(ctx, "k1", []byte("shadow secret"), time.Hour))
	lanes := []string{"default"}
	lane := func(name string) string {
		if !slices.Contains(lanes, name) {
			lanes = append(lanes, name)
		}
		return name
	}
	p := plantedState{races: map[keys.FlowID]keys.ExecutionID{}}
	var dueAt int64
	due := func(ms int64) { dueAt = max(dueAt, ms) }

	// lease_expiry: two leases of 50 ms that lapse (no worker renews
	// them), and a member of its index that is not an execution id.
	for _, part := range []uint16{3, 11} {
		leaseFor(t, c, keys.Partition{Family: keys.FamilyFlow, Index: part}, 50*time.Millisecond)
	}
	due(w.NowMs() + 50)
	w.Do("ZADD", keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: 3}).LeaseExpiry(), "1", "garbage")

	// attempt_timeout: a running attempt whose 1 ms timeout lapses.
	slow := create(client.CreateRequest{Lane: lane("slow"), Kind: "slow", AttemptTimeout: time.Millisecond})
	claim("slow", slow)
	due(w.NowMs() + 1)

	// execution_deadline: an execution never claimed, past its deadline
	// (ahead enough to pass the client's "not in the past" check on a
	// loaded machine).
	deadline := time.UnixMilli(w.NowMs() + 2000)
	create(client.CreateRequest{Lane: lane("late"), Kind: "late", Deadline: deadline})
	due(deadline.UnixMilli())

	// delayed_promoter: a delayed execution come due.
	create(client.CreateRequest{Lane: "default", Kind: "later", Delay: 300 * time.Millisecond})
	due(w.NowMs() + 300)

	// suspension_timeout: a suspension whose 1 ms timeout lapses.
	suspended := create(client.CreateRequest{Lane: lane("suspend"), Kind: "wait"})
	_, err := claim("suspend", suspended).Suspend(ctx, client.SuspendRequest{Signals: []string{"go"},
		Timeout: time.Millisecond, OnTimeout: client.TimeoutFail})
	require.NoError(t, err)
	due(w.NowMs() + 1)

	// pending_wp_expiry: a pending waitpoint no suspension used, expired.
	waiting := create(client.CreateRequest{Lane: lane("callback"), Kind: "callback"})
	_, err = claim("callback", waiting).CreatePendingWaitpoint(ctx, "", time.Millisecond)
	require.NoError(t, err)
	due(w.NowMs() + 1)

	// cancel_reconciler: a flow cancelled with no grace over two waiting
	// members, a running one and a completed one.
	cancelled, err := w.Client.CreateFlow(ctx, client.CreateFlowRequest{})
	require.NoError(t, err)
	p.cancelled = cancelled.ID
	member := func(fid keys.FlowID, ln string) keys.ExecutionID {
		return create(client.CreateRequest{Flow: &fid, Lane: lane(ln), Kind: "step"})
	}
	member(cancelled.ID, "default")
	member(cancelled.ID, "default")
	claim("cancel-running", member(cancelled.ID, "cancel-running"))
	require.NoError(t, flowtest.Succeed(ctx, lib, member(cancelled.ID, "default"), []byte("ok")))
	zero := time.Duration(0)
	_, err = w.Client.CancelFlow(ctx, cancelled.ID, client.CancelFlowOptions{Reason: "shadow", Grace: &zero})
	require.NoError(t, err)

	// dependency_reconciler: A -> B with A completed while no completion
	// listener ran.
	dag, err := w.Client.CreateFlow(ctx, client.CreateFlowRequest{})
	require.NoError(t, err)
	up, down := member(dag.ID, "default"), member(dag.ID, "default")
	_, err = w.Client.AddDependency(ctx, client.DependencyRequest{Flow: dag.ID, Upstream: up, Downstream: down})
	require.NoError(t, err)
	require.NoError(t, flowtest.Succeed(ctx, lib, up, []byte("a")))

	// edge_cancel_dispatcher and edge_cancel_reconciler: D waits on any of
	// A, B, C; A completed and the push path flagged the group, B runs,
	// C waits. In a second such flow B and C were already cancelled (the
	// dispatcher died before draining).
	for _, preCancelled := range []bool{false, true} {
		race, err := w.Client.CreateFlow(ctx, client.CreateFlowRequest{})
		require.NoError(t, err)
		fid := race.ID
		a, b, cc, d := member(fid, "default"), member(fid, "race-running"), member(fid, "default"), member(fid, "default")
		p.races[fid] = d
		_, err = w.Client.SetEdgeGroupPolicy(ctx, fid, d, client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"})
		require.NoError(t, err)
		for _, u := range []keys.ExecutionID{a, b, cc} {
			_, err := w.Client.AddDependency(ctx, client.DependencyRequest{Flow: fid, Upstream: u, Downstream: d})
			require.NoError(t, err)
		}
		claim("race-running", b)
		require.NoError(t, flowtest.Succeed(ctx, lib, a, []byte("first")))
		_, err = depresolve.New(depexec.LibraryExecutor(lib), depresolve.Options{}).
			Cascade(ctx, depresolve.Completion{Execution: a, Flow: fid})
		require.NoError(t, err)
		if preCancelled {
			for _, id := range []keys.ExecutionID{b, cc} {
				_, err := w.Client.Cancel(ctx, id, client.CancelOptions{Reason: "done elsewhere"})
				require.NoError(t, err)
			}
		}
	}

	// retention_trimmer: two executions that ended two hours ago (their
	// completion time and terminal index score set back), one just ended.
	var ended []keys.ExecutionID
	for range 3 {
		id := create(client.CreateRequest{Lane: lane("done"), Kind: "job", Payload: []byte("in")})
		require.NoError(t, flowtest.Succeed(ctx, lib, id, []byte("out")))
		ended = append(ended, id)
	}
	then := strconv.FormatInt(w.NowMs()-2*time.Hour.Milliseconds(), 10)
	p.purged = ended[:2]
	for _, id := range p.purged {
		w.Do("HSET", keys.Exec(id).Core(), "completed_at", then)
		w.Do("ZADD", keys.FlowPart(id.Partition()).LaneTerminal("done"), then, id.String())
	}

	// budget_reset: two budgets whose 300 ms reset came due, one reset
	// hourly. budget_reconciler: a lifetime budget over its hard limit
	// unmarked, one under it still marked breached, an orphan id.
	budget := func(every time.Duration, hard, used int64) keys.BudgetID {
		t.Helper()
		b, err := w.Client.CreateBudget(ctx, client.CreateBudgetRequest{ScopeType: "lane", ScopeID: "default", ResetInterval: every,
			Dimensions: []client.BudgetDimension{{Name: "tokens", Hard: hard}}})
		require.NoError(t, err)
		if used > 0 {
			_, err = w.Client.ReportUsage(ctx, client.UsageReport{Budget: b.ID, Deltas: []client.UsageDelta{{Dimension: "tokens", Delta: used}}})
			require.NoError(t, err)
		}
		return b.ID
	}
	budget(300*time.Millisecond, 0, 9)
	budget(300*time.Millisecond, 0, 9)
	due(w.NowMs() + 300)
	budget(time.Hour, 0, 9)
	over := budget(0, 100, 100)
	w.Do("HINCRBY", keys.Budget(parts, over).Usage(), "tokens", "1")
	under := budget(0, 100, 50)
	w.Do("HSET", keys.Budget(parts, under).Usage(), "breached_at", "1")
	orphanBudget := keys.BudgetIDFrom(keys.NewUUID())
	w.Do("SADD", keys.Budget(parts, orphanBudget).Partition().BudgetPolicies(), orphanBudget.String())

	// quota_reconciler: an admission whose execution ended without
	// releasing its slot, a window past its length, an orphan id.
	quota := func(window time.Duration, maxRequests, maxConcurrent int) keys.QuotaID {
		t.Helper()
		q, err := w.Client.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{Window: window, MaxRequests: maxRequests, MaxConcurrent: maxConcurrent})
		require.NoError(t, err)
		return q.ID
	}
	admit := func(q keys.QuotaID, id keys.ExecutionID) {
		t.Helper()
		a, err := w.Client.Admit(ctx, q, id)
		require.NoError(t, err)
		require.True(t, a.Admitted)
	}
	capped, windowed := quota(time.Hour, 0, 2), quota(time.Second, 5, 0)
	p.capped = capped
	running, leaked := create(client.CreateRequest{Lane: "default", Kind: "k"}), create(client.CreateRequest{Lane: lane("leak"), Kind: "k"})
	admit(capped, running)
	admit(capped, leaked)
	require.NoError(t, flowtest.Succeed(ctx, lib, leaked, nil))
	admit(windowed, create(client.CreateRequest{Lane: "default", Kind: "k"}))
	due(w.NowMs() + 1000)
	orphanQuota := keys.QuotaIDFrom(keys.NewUUID())
	w.Do("SADD", keys.Quota(parts, orphanQuota).Partition().QuotaPolicies(), orphanQuota.String())

	// unblock: an execution a worker without its capability parked
	// (blocked:route) while a worker with it is registered; one parked by
	// a budget since reset; one parked by a quota whose window moved on.
	gpu := create(client.CreateRequest{Lane: lane("route"), Kind: "k", RequiredCapabilities: []string{"gpu"}})
	plain := worker("route")
	for range scannertest.MaxClaimRounds {
		task, err := plain.ClaimNext(ctx)
		require.NoError(t, err)
		require.Nil(t, task)
		if coreField(c, gpu, "eligibility_state") == "blocked_by_route" {
			break
		}
	}
	require.Equal(t, "blocked_by_route", coreField(c, gpu, "eligibility_state"))
	// A worker that registered once (FlowFabric's SDK does not refresh).
	fcall(t, c, "ff_register_worker", []string{keys.WorkerAlive("ns", "gpu-box"), keys.WorkerCaps("ns", "gpu-box"), keys.WorkersIndex("ns")},
		"gpu-box", "w", "other", "gpu", strconv.FormatInt(time.Hour.Milliseconds(), 10), strconv.FormatInt(w.NowMs(), 10))
	block := func(id keys.ExecutionID, ln, reason, set string, fields ...string) {
		t.Helper()
		w.Do(append([]string{"HSET", keys.Exec(id).Core()}, fields...)...)
		fcall(t, c, "ff_block_execution_for_admission", []string{keys.Exec(id).Core(), keys.FlowPart(id.Partition()).LaneEligible(ln), set},
			id.String(), reason, "shadow", strconv.FormatInt(w.NowMs(), 10))
	}
	spent := budget(0, 100, 100)
	_, err = w.Client.ResetBudget(ctx, spent)
	require.NoError(t, err)
	parked := create(client.CreateRequest{Lane: lane("budget"), Kind: "k"})
	block(parked, "budget", "waiting_for_budget", keys.FlowPart(parked.Partition()).LaneBlockedBudget("budget"), "budget_ids", spent.String())
	oneAtATime := quota(time.Second, 1, 0)
	admit(oneAtATime, create(client.CreateRequest{Lane: "default", Kind: "k"}))
	due(w.NowMs() + 1000)
	throttled := create(client.CreateRequest{Lane: lane("quota"), Kind: "k"})
	block(throttled, "quota", "waiting_for_quota", keys.FlowPart(throttled.Partition()).LaneBlockedQuota("quota"), "quota_policy_id", oneAtATime.String())

	// flow_projector: every flow above is in flow_index to summarise.
	// index_reconciler (detect only): an execution missing from the
	// index its state names.
	lost := create(client.CreateRequest{Lane: "default", Kind: "k"})
	w.Do("ZREM", keys.FlowPart(lost.Partition()).LaneEligible("default"), lost.String())

	// Nothing renews or heartbeats from now on.
	for _, wk := range workers {
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, wk.Close(cctx))
	}
	w.Do(append([]string{"SADD", keys.LanesIndex}, lanes...)...)
	w.Do(append([]string{"HSET", keys.ConfigPartitions}, parts.HashFields()...)...)
	// A suspend call's dedup record lives a minute past the suspension's
	// timeout: given an hour, so that it does not expire between DUMPs.
	dedups, err := c.Do(ctx, c.B().Keys().Pattern(keys.Exec(suspended).SuspendDedup("*")).Build()).AsStrSlice()
	require.NoError(t, err)
	require.Len(t, dedups, 1)
	w.Do("PEXPIRE", dedups[0], strconv.FormatInt(time.Hour.Milliseconds(), 10))
	w.WaitPast(dueAt)
	// No key expires while the test runs.
	for k, st := range snapshotKeyspace(t, c) {
		if st.expireAt > 0 {
			require.Greater(t, st.expireAt, w.NowMs()+10*time.Minute.Milliseconds(), "%s expires within the test", k)
		}
	}
	p.lanes = lanes
	return p
}
