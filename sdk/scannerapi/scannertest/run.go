package scannertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// Case describes a scanner for Run.
type Case struct {
	// Runner is the scanner host the runs go through (required):
	// hosttest.Runner{} for ffscan's.
	Runner Runner
	// New returns a fresh scanner for the linked run.
	New func() scannerapi.Scanner
	// Plugin is the main package of the plugin binary that serves the
	// same scanner (an import path or a directory, as for go build).
	// Binary is an already built one. With neither, only the linked run
	// happens.
	Plugin string
	Binary string
	// Options are the scanner's options, as under scanners.<name>.options
	// in the host configuration (checked against the scanner's schema).
	Options map[string]string
	// Fixtures are commands run on the emptied server before each run,
	// after the host booted (the flowfabric library is loaded, so FCALLs
	// work).
	Fixtures []scannerapi.Command
	// Setup, if set, runs after Fixtures, for fixtures that need code
	// (an sdk/client producer, the server's clock, ...).
	Setup func(t testing.TB, c valkey.Client)
	// Cycles is the number of cycles each run does (default 1).
	Cycles int
	// Only limits every cycle to these partition indexes; nil: all.
	Only []uint16
	// DryRun asks the scanner not to mutate; the host refuses its writes
	// and FCALLs if it tries.
	DryRun bool
	// Partitions are the partition counts (default flow 16, budget 4,
	// quota 4: small, so a test's items are easy to place).
	Partitions keys.PartitionConfig
	// Lanes the host knows (default "default").
	Lanes []string
	// Check, if set, runs after each run with its report and a client on
	// the server, to assert what the scanner left behind.
	Check func(t testing.TB, r Report, c valkey.Client)
	// Addr is a server to use instead of starting one. It is FLUSHALLed
	// before each run.
	Addr string
	// PostgresDSN is the FlowFabric Postgres database the host serves, for
	// scanners with Postgres sources. The kit does not reset it between
	// runs: Setup puts it in the state each run starts from, and Check
	// reads it (both through the test's own connection).
	PostgresDSN string
	// PostgresFilter is the host's namespace / instance-tag filter on
	// that database (postgres.namespace, postgres.instance_tag).
	PostgresFilter scannerapi.Filter
}

// Report is what one run did.
type Report struct {
	// Mode is "linked" or "plugin".
	Mode string
	// Cycles run, and their partition outcomes summed.
	Cycles                           int
	Scanned, Empty, Failed, Deferred int
	// Items the scanner processed and skipped, and its errors by
	// "class/code".
	Processed, Skipped int64
	Errors             map[string]int64
	// Backlog of the last cycle, if every partition was measured.
	Backlog      int64
	BacklogKnown bool
	// Notes the scanner returned.
	Notes []string
	// Commands the scanner ran through the host, by name ("FCALL fn" and
	// "PGCALL fn" for functions); Refused the ones the host refused, by reason
	// (undeclared_command, key_prefix, dry_run, ...).
	Commands map[string]int
	Refused  map[string]int
	// Keys is every key on the server after the run, dumped as
	// "type contents" with sorted fields and members.
	Keys map[string]string
	// Duration of the cycles.
	Duration time.Duration
}

// String summarises the report in a few lines.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d cycle(s): %d partitions scanned, %d empty, %d failed, %d deferred; %d processed, %d skipped",
		r.Mode, r.Cycles, r.Scanned, r.Empty, r.Failed, r.Deferred, r.Processed, r.Skipped)
	if r.BacklogKnown {
		fmt.Fprintf(&b, "; backlog %d", r.Backlog)
	}
	fmt.Fprintf(&b, "; %s", r.Duration.Round(time.Microsecond))
	if len(r.Errors) > 0 {
		fmt.Fprintf(&b, "\n  errors: %s", countList(r.Errors))
	}
	if len(r.Commands) > 0 {
		fmt.Fprintf(&b, "\n  commands: %s", countList(r.Commands))
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(&b, "\n  REFUSED: %s", countList(r.Refused))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n  note: %s", n)
	}
	fmt.Fprintf(&b, "\n  %d key(s) after the run", len(r.Keys))
	return b.String()
}

func countList[V int | int64](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// Run runs a scanner the way ffscan does, against a real server with the
// case's fixtures, and reports what it did: once linked into this process
// and, when the case names a plugin, once as that plugin's subprocess.
// Both runs go through an ffscan host (boot, candidate fetching by the
// scheduler, the callback service enforcing the commands the scanner
// declared), each on a freshly emptied server with the same fixtures, so
// their reports should agree; Same checks that they do.
//
//	linked, plugin := scannertest.Run(t, scannertest.Case{
//		Runner:   hosttest.Runner{},
//		New:      func() scannerapi.Scanner { return mine.New() },
//		Plugin:   "example.com/mine/cmd/mine",
//		Fixtures: []scannerapi.Command{{"ZADD", "ff:idx:{fp:3}:lane:default:delayed", "1000", id}},
//	})
//	scannertest.Same(t, linked, plugin)
//
// The server is started with valkey-server or redis-server from PATH
// (or $FFSCAN_TEST_SERVER) unless Case.Addr names one. Run fails the test
// on any setup error or failed cycle; per-item errors are in the report.
func Run(t testing.TB, c Case) (linked, plugin Report) {
	t.Helper()
	if c.New == nil {
		t.Fatal("scannertest: Case.New is required")
	}
	if c.Runner == nil {
		t.Fatal("scannertest: Case.Runner is required (ffscan's host: github.com/ffscan/ffscan/host/hosttest.Runner{})")
	}
	name := c.New().Info().Name
	addr := c.Addr
	if addr == "" {
		addr = testserver.New(t).Addr
	}
	var binDir string
	bin := c.Binary
	if bin == "" && c.Plugin != "" {
		bin = BuildPlugin(t, c.Plugin)
	}
	if bin != "" {
		// A plugin directory the catalog accepts (not world-writable, a
		// regular file, no symlink) holding a copy of the binary.
		binDir = filepath.Join(t.TempDir(), "plugins")
		if err := os.Mkdir(binDir, 0o755); err != nil {
			t.Fatalf("scannertest: %v", err)
		}
		copyBinary(t, bin, filepath.Join(binDir, name))
	}
	linked = runMode(t, c, name, addr, binDir, true)
	if bin != "" {
		plugin = runMode(t, c, name, addr, binDir, false)
	}
	return linked, plugin
}

func runMode(t testing.TB, c Case, name, addr, binDir string, linked bool) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mode := "plugin"
	if linked {
		mode = "linked"
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("scannertest (%s run of %s): %s", mode, name, fmt.Sprintf(format, args...))
	}
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		fail("connect: %v", err)
	}
	defer client.Close()
	if err := client.Do(ctx, client.B().Flushall().Build()).Error(); err != nil {
		fail("FLUSHALL: %v", err)
	}
	h, err := c.Runner.Boot(ctx, c.boot(name, addr, binDir))
	if err != nil {
		fail("boot: %v", err)
	}
	defer h.Close()
	if err := loadFixtures(ctx, client, c.Fixtures); err != nil {
		fail("%v", err)
	}
	if c.Setup != nil {
		c.Setup(t, client)
	}

	rep := Report{Mode: mode, Errors: map[string]int64{}, Commands: map[string]int{}, Refused: map[string]int{}}
	sopts := Open{DryRun: c.DryRun, Observe: rep.observer()}
	if linked {
		sopts.Linked = c.New()
	}
	sess, err := h.Open(ctx, sopts)
	if err != nil {
		fail("start: %v", err)
	}
	defer sess.Close()
	t0 := time.Now()
	if err := c.cycles(ctx, sess, &rep); err != nil {
		fail("cycle: %v", err)
	}
	rep.Duration = time.Since(t0)
	sess.Close()
	rep.Keys = snapshot(ctx, t, client)
	if c.Check != nil {
		c.Check(t, rep, client)
	}
	return rep
}

// boot is the host configuration of the case's run: its partitions (flow
// 16, budget 4, quota 4 by default), lanes ("default") and options.
func (c Case) boot(name, addr, binDir string) Boot {
	parts := c.Partitions
	if parts == (keys.PartitionConfig{}) {
		parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}
	}
	lanes := c.Lanes
	if len(lanes) == 0 {
		lanes = []string{"default"}
	}
	opts := map[string]string{}
	for k, v := range c.Options {
		opts[k] = v
	}
	return Boot{Scanner: name, Addr: addr, PluginDir: binDir, Options: opts, Partitions: parts, Lanes: lanes,
		PostgresDSN: c.PostgresDSN, PostgresFilter: c.PostgresFilter}
}

// loadFixtures runs the case's fixture commands; any failed reply fails.
func loadFixtures(ctx context.Context, client valkey.Client, fixtures []scannerapi.Command) error {
	if len(fixtures) == 0 {
		return nil
	}
	replies, err := Exec(ctx, client, fixtures)
	if err != nil {
		return fmt.Errorf("fixtures: %w", err)
	}
	for i, r := range replies {
		if r.Failed() {
			return fmt.Errorf("fixture %d %v: %s", i, fixtures[i], r.Err)
		}
	}
	return nil
}

// observer counts, into the report, every command the scanner ran
// through the host and every refusal.
func (r *Report) observer() func(cmds []scannerapi.Command, replies []scannerapi.Reply) {
	var mu sync.Mutex
	return func(cmds []scannerapi.Command, replies []scannerapi.Reply) {
		mu.Lock()
		defer mu.Unlock()
		for i, cmd := range cmds {
			r.Commands[commandName(cmd)]++
			if i < len(replies) && replies[i].ErrClass == scannerapi.ErrRefused {
				r.Refused[refusalReason(replies[i].Err)]++
			}
		}
	}
}

// cycles runs the case's cycles (at least one), over every partition or
// the ones in Only, adding each to the report.
func (c Case) cycles(ctx context.Context, sess Session, rep *Report) error {
	parts := []int{-1}
	if c.Only != nil {
		parts = parts[:0]
		for _, p := range c.Only {
			parts = append(parts, int(p))
		}
	}
	for range max(c.Cycles, 1) {
		for _, p := range parts {
			sum, err := sess.Cycle(ctx, p)
			if err != nil {
				return err
			}
			add(rep, sum)
		}
	}
	return nil
}

func add(r *Report, s Cycle) {
	r.Cycles++
	r.Scanned += s.Scanned
	r.Empty += s.Empty
	r.Failed += s.Failed
	r.Deferred += s.Deferred
	r.Processed += s.Processed
	r.Skipped += s.Skipped
	for k, n := range s.Errors {
		r.Errors[k] += n
	}
	r.Backlog, r.BacklogKnown = s.Backlog, s.BacklogKnown
	r.Notes = append(r.Notes, s.Notes...)
}

func commandName(c scannerapi.Command) string {
	if len(c) == 0 {
		return "(empty)"
	}
	n := strings.ToUpper(c[0])
	if (n == "FCALL" || n == "FCALL_RO" || n == "PGCALL") && len(c) > 1 {
		return n + " " + c[1]
	}
	return n
}

// refusalReason reads the reason out of the host's refusal text
// ("refused: <reason>: ...").
func refusalReason(msg string) string {
	rest, ok := strings.CutPrefix(msg, "refused: ")
	if !ok {
		return "other"
	}
	reason, _, _ := strings.Cut(rest, ":")
	return reason
}

// snapshot dumps every key on the server.
func snapshot(ctx context.Context, t testing.TB, c valkey.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("scannertest: SCAN: %v", err)
		}
		for _, k := range e.Elements {
			out[k] = dumpKey(ctx, c, k)
		}
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}

func dumpKey(ctx context.Context, c valkey.Client, k string) string {
	typ, err := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return "error " + err.Error()
	}
	sorted := func(ss []string) string { sort.Strings(ss); return strings.Join(ss, " ") }
	switch typ {
	case "string":
		v, _ := c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
		return "string " + strconv.Quote(v)
	case "hash":
		m, _ := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
		var fs []string
		for f, v := range m {
			fs = append(fs, strconv.Quote(f)+"="+strconv.Quote(v))
		}
		return "hash " + sorted(fs)
	case "set":
		ms, _ := c.Do(ctx, c.B().Smembers().Key(k).Build()).AsStrSlice()
		for i := range ms {
			ms[i] = strconv.Quote(ms[i])
		}
		return "set " + sorted(ms)
	case "zset":
		zs, _ := c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
		var ms []string
		for _, z := range zs {
			ms = append(ms, strconv.Quote(z.Member)+"@"+strconv.FormatFloat(z.Score, 'g', -1, 64))
		}
		return "zset " + strings.Join(ms, " ")
	case "list":
		ls, _ := c.Do(ctx, c.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
		for i := range ls {
			ls[i] = strconv.Quote(ls[i])
		}
		return "list " + strings.Join(ls, " ")
	}
	return typ
}

// Same checks that two reports (typically the linked and the plugin run
// of one Case) did the same: partition outcomes, items, errors, the
// commands run and refused, and the keys left with their types. Keys are
// compared by shape (every UUID read as <uuid>, every partition tag as
// {fp:*}, {b:*} or {q:*}), so fixtures that mint ids per run (an
// sdk/client producer) still compare; key contents are not compared
// either: they often hold timestamps. Assert both in Case.Check.
func Same(t testing.TB, a, b Report) {
	t.Helper()
	var diffs []string
	cmp := func(what string, x, y any) {
		if fmt.Sprint(x) != fmt.Sprint(y) {
			diffs = append(diffs, fmt.Sprintf("%s: %s %v, %s %v", what, a.Mode, x, b.Mode, y))
		}
	}
	cmp("cycles", a.Cycles, b.Cycles)
	cmp("scanned", a.Scanned, b.Scanned)
	cmp("empty", a.Empty, b.Empty)
	cmp("failed", a.Failed, b.Failed)
	cmp("processed", a.Processed, b.Processed)
	cmp("skipped", a.Skipped, b.Skipped)
	cmp("errors", countList(a.Errors), countList(b.Errors))
	cmp("commands", countList(a.Commands), countList(b.Commands))
	cmp("refused", countList(a.Refused), countList(b.Refused))
	cmp("backlog", fmt.Sprint(a.Backlog, a.BacklogKnown), fmt.Sprint(b.Backlog, b.BacklogKnown))
	cmp("keys", keyTypes(a.Keys), keyTypes(b.Keys))
	if len(diffs) > 0 {
		t.Errorf("scannertest: the runs differ:\n  %s\n%s\n%s", strings.Join(diffs, "\n  "), a, b)
	}
}

var (
	uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	tagPattern  = regexp.MustCompile(`\{(fp|b|q):[0-9]+\}`)
)

// keyShape is a key with its ids and partition tags blanked out.
func keyShape(k string) string {
	return tagPattern.ReplaceAllString(uuidPattern.ReplaceAllString(k, "<uuid>"), "{$1:*}")
}

func keyTypes(m map[string]string) string {
	var out []string
	for k, v := range m {
		typ, _, _ := strings.Cut(v, " ")
		out = append(out, keyShape(k)+":"+typ)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func copyBinary(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("scannertest: %v", err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatalf("scannertest: %v", err)
	}
}
