// Package explain answers "why is my execution stuck?": for one
// execution, what every scanner of the host does with it on its next
// cycle, and why.
//
// The verdict of each scanner comes from two places and never from a
// copy of a scanner's rules:
//
//   - what only the host knows: whether the scanner is enabled and its
//     plugin runs, which host owns the execution's partition, the lanes it
//     scans, when the scanner's next cycle is, and what the scanner's
//     sources hold for the execution (its entries and their scores, read
//     the way a cycle reads them: a due-time index is due when its score
//     is at most now plus the source's offset; on Postgres the candidate
//     function's own rows);
//   - the scanner itself, asked through scannerapi.Explainer with the
//     request its next scan would get (the execution's due entries as the
//     candidates): the plugin answers from the predicates its scan uses,
//     its failure backoff, memory and options, reading the store through
//     the host's read-only callbacks.
//
// Explain writes nothing, to the store or to a scanner's state.
package explain

import (
	"context"
	"errors"
	"fmt"
	"github.com/ffscan/ffscan/host/audit"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Host-level verdicts, beside the scanners' own (scannerapi.Verdict).
const (
	// Disabled: the scanner is configured but not enabled.
	Disabled = "disabled"
	// NotRunning: its plugin is not serving (starting, restarting,
	// broken, refused: a policy waiting for approval among others).
	NotRunning = "not_running"
	// NotOwned: another host owns the execution's partition.
	NotOwned = "not_owned"
	// LaneNotScanned: the execution's lane is not among the lanes the
	// host scans.
	LaneNotScanned = "lane_not_scanned"
	// NotExplained: the scanner does not explain its decisions (a plugin
	// built without Explainer); the host's facts stand.
	NotExplained = "not_explained"
	// Failed: asking the scanner failed.
	Failed = "failed"
)

// Report is the answer for one execution.
type Report struct {
	ExecutionID string `json:"execution_id"`
	Partition   string `json:"partition"`
	// Store is "valkey" or "postgres".
	Store string `json:"store"`
	// NowMs is the store's clock when the report was made.
	NowMs int64 `json:"now_ms"`
	// Found says whether the execution's core exists.
	Found bool `json:"found"`
	// Core holds the core's state fields.
	Core map[string]string `json:"core,omitempty"`
	// Owner is the host that owns the partition ("" when hosts do not
	// share the keyspace); Owned says whether it is this host.
	Owner string `json:"owner,omitempty"`
	Owned bool   `json:"owned"`
	// Entries are the execution's entries in the scanners' sources.
	Entries []Entry `json:"entries"`
	// Scanners is one verdict per scanner of the host.
	Scanners []Verdict `json:"scanners"`
	// Inconsistent lists what disagrees in the store about the execution.
	Inconsistent []string `json:"inconsistent,omitempty"`
	// History is what was done to the execution, newest first: the
	// audit trail's latest entries about it (host/audit); HistoryError
	// says why it could not be read.
	History      []audit.Entry `json:"history,omitempty"`
	HistoryError string        `json:"history_error,omitempty"`
}

// Entry is one entry of the execution in a scanner's source.
type Entry struct {
	Scanner string  `json:"scanner"`
	Source  string  `json:"source"`
	Key     string  `json:"key"`
	Member  string  `json:"member"`
	Score   float64 `json:"score"`
	// Due: a cycle now would read it (its score is at most now plus the
	// source's offset, or it is in a source read whole).
	Due bool `json:"due"`
}

// Verdict is one scanner's answer.
type Verdict struct {
	Scanner string `json:"scanner"`
	// Verdict is a scannerapi.Verdict (acts, waits, skips, nothing) or a
	// host-level one (disabled, not_running, not_owned, lane_not_scanned,
	// not_explained, failed).
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// DueAt is when the execution is (was) due for the scanner.
	DueAt *time.Time `json:"due_at,omitempty"`
	// NextCycleAt is when the scanner's next cycle starts (about: the
	// last cycle's start plus its interval).
	NextCycleAt *time.Time `json:"next_cycle_at,omitempty"`
	// Cycle is the scanner's cycle count; BackoffUntilCycle the first
	// cycle a backed-off execution is tried again.
	Cycle             uint64 `json:"cycle,omitempty"`
	BackoffUntilCycle uint64 `json:"backoff_until_cycle,omitempty"`
	// From says who decided: "scanner" (its Explain) or "host".
	From string `json:"from"`
	// Shadow: the scanner runs in shadow mode, so what it would do is
	// held back and recorded, not done (Detail begins "would act
	// (shadow)").
	Shadow bool `json:"shadow,omitempty"`
	// Paused: the scanner paused itself at its action budget, so what it
	// would do waits for a resume (Detail says so).
	Paused bool `json:"paused,omitempty"`
}

// Target is one scanner of the host as explain sees it.
type Target struct {
	Name    string
	Enabled bool
	// State is the supervisor's state, StateReason its last error.
	State, StateReason string
	// Acquire holds the running instance for one call (nil: none runs).
	Acquire func() (Instance, error)
	// Cycle and LastCycleAt are the runner's, Interval and Batch the
	// effective ones.
	Cycle       uint64
	LastCycleAt time.Time
	Interval    time.Duration
	Batch       int
	// Shadow: the scanner runs in shadow mode (its writes held back).
	Shadow bool
	// Paused says why the scanner paused itself at its action budget
	// (empty: it did not).
	Paused string
}

// Instance is a running scanner held for one call.
type Instance struct {
	Scanner scannerapi.Scanner
	Info    scannerapi.Info
	// Host runs the scanner's commands under its policy (nil: the
	// plugin's own callbacks).
	Host    scannerapi.Host
	Release func()
}

// Env is what the host hands explain.
type Env struct {
	Valkey valkey.Client // nil: no Valkey
	// Postgres and its filter (nil: no database).
	Postgres *pgxpool.Pool
	// PostgresReads are the connections of the candidate reads (nil:
	// Postgres's).
	PostgresReads  *postgres.Readers
	PostgresFilter scannerapi.Filter
	Partitions     keys.PartitionConfig
	// Lanes are the lanes the host scans.
	Lanes []string
	// Owner says which host owns a partition: this one (owned), another
	// (its id), or nobody shares the keyspace ("", true).
	Owner func(ctx context.Context, p keys.Partition) (owner string, owned bool)
	// Now is the host's clock, for the next cycle's time.
	Now     func() time.Time
	Targets []Target
}

// ErrBadID is returned for an id that is not an execution id.
var ErrBadID = errors.New("not an execution id")

// coreFields are the core's fields the report shows and the sources'
// members are derived from.
var coreFields = []string{"execution_id", "lifecycle_phase", "ownership_state", "eligibility_state", "public_state",
	"blocking_reason", "lane_id", "flow_id", "current_waitpoint_id", "current_attempt_index", "lease_expires_at",
	"deadline_at", "namespace"}

// Explain builds the report for the execution id.
func Explain(ctx context.Context, env Env, id string) (*Report, error) {
	eid, err := keys.ParseExecutionID(strings.TrimSpace(id))
	if err != nil {
		return nil, fmt.Errorf("%w: %q (%v)", ErrBadID, id, err)
	}
	p := eid.Partition()
	rep := &Report{ExecutionID: eid.String(), Partition: p.String(), Owned: true}
	if env.Owner != nil {
		rep.Owner, rep.Owned = env.Owner(ctx, p)
	}
	if env.Valkey != nil {
		rep.Store = "valkey"
		if err := readValkey(ctx, env, eid, rep); err != nil {
			return nil, err
		}
	} else if env.Postgres != nil {
		rep.Store = "postgres"
		if err := readPostgres(ctx, env, eid, rep); err != nil {
			return nil, err
		}
	} else {
		return nil, errors.New("the host has no store")
	}
	for _, t := range env.Targets {
		rep.Scanners = append(rep.Scanners, verdictOf(ctx, env, rep, eid, t))
	}
	rep.Inconsistent = append(rep.Inconsistent, inconsistencies(rep)...)
	return rep, nil
}

// readValkey reads the clock and the core.
func readValkey(ctx context.Context, env Env, eid keys.ExecutionID, rep *Report) error {
	c := env.Valkey
	core := keys.Exec(eid).Core()
	rs := c.DoMulti(ctx,
		c.B().Time().Build(),
		c.B().Hmget().Key(core).Field(coreFields...).Build())
	t, err := rs[0].AsStrSlice()
	if err != nil || len(t) != 2 {
		return fmt.Errorf("valkey TIME: %v", err)
	}
	sec, _ := strconv.ParseInt(t[0], 10, 64)
	usec, _ := strconv.ParseInt(t[1], 10, 64)
	rep.NowMs = sec*1000 + usec/1000
	vals, err := rs[1].ToArray()
	if err != nil {
		if ve, ok := valkey.IsValkeyErr(err); ok && strings.HasPrefix(ve.Error(), "WRONGTYPE") {
			// Not an outage: a fact about the store to show.
			rep.Inconsistent = append(rep.Inconsistent, core+" is not a hash")
			return nil
		}
		return fmt.Errorf("read %s: %w", core, err)
	}
	rep.Core = map[string]string{}
	for i, f := range coreFields {
		if i < len(vals) {
			if s, err := vals[i].ToString(); err == nil && s != "" {
				rep.Core[f] = s
			}
		}
	}
	rep.Found = rep.Core["execution_id"] != "" || rep.Core["lifecycle_phase"] != ""
	return nil
}

// readPostgres reads the database's clock and the execution's row.
func readPostgres(ctx context.Context, env Env, eid keys.ExecutionID, rep *Report) error {
	now, err := postgres.Now(ctx, env.Postgres)
	if err != nil {
		return err
	}
	rep.NowMs = now
	var phase, own, elig, lane string
	var deadline *int64
	err = env.Postgres.QueryRow(ctx, `SELECT lifecycle_phase, ownership_state, eligibility_state, lane_id, deadline_at_ms
		FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`, int16(eid.Partition().Index), eid.UUID().String()).
		Scan(&phase, &own, &elig, &lane, &deadline)
	if err != nil {
		if strings.Contains(err.Error(), "no rows") {
			return nil
		}
		return fmt.Errorf("postgres: read the execution: %w", err)
	}
	rep.Found = true
	rep.Core = map[string]string{"lifecycle_phase": phase, "ownership_state": own, "eligibility_state": elig, "lane_id": lane}
	if deadline != nil {
		rep.Core["deadline_at"] = strconv.FormatInt(*deadline, 10)
	}
	return nil
}

// verdictOf decides one scanner's verdict: the host's reasons first (the
// scanner's state, the store, family and owner of the partition, the
// lane, a due time not reached), then the scanner's own.
func verdictOf(ctx context.Context, env Env, rep *Report, eid keys.ExecutionID, t Target) Verdict {
	v := Verdict{Scanner: t.Name, From: "host", Cycle: t.Cycle}
	if !t.LastCycleAt.IsZero() && t.Interval > 0 {
		next := t.LastCycleAt.Add(t.Interval)
		if env.Now != nil && next.Before(env.Now()) {
			next = env.Now()
		}
		v.NextCycleAt = &next
	}
	inst, ok := acquire(&v, t)
	if !ok {
		return v
	}
	defer func() {
		if inst.Release != nil {
			inst.Release()
		}
	}()
	if !placed(&v, inst.Info, rep) {
		return v
	}
	req := scannerapi.ScanRequest{
		Scanner: t.Name, Partition: eid.Partition(), NowMs: rep.NowMs, Cycle: t.Cycle + 1,
		Batch: t.Batch, Lanes: env.Lanes, DryRun: true,
	}
	waits, ok := candidates(ctx, &v, env, inst.Info, eid, t, rep, &req)
	if !ok {
		return v
	}
	if len(req.Candidates) == 0 && waits != nil {
		notDue(&v, inst.Info, waits, rep)
		return v
	}
	scannerVerdict(ctx, &v, inst, eid, t, rep, &req)
	shadowed(&v, t)
	paused(&v, t)
	return v
}

// paused marks what a scanner paused at its action budget would do: it
// does nothing until an operator resumes it.
func paused(v *Verdict, t Target) {
	if t.Paused == "" || v.Verdict != string(scannerapi.VerdictActs) {
		return
	}
	v.Paused = true
	what := "would act once resumed (paused: " + t.Paused + ")"
	if v.Detail != "" {
		what += "; " + v.Detail
	}
	v.Detail = what
}

// shadowed marks what a scanner in shadow mode would do: nothing of it
// is done.
func shadowed(v *Verdict, t Target) {
	if !t.Shadow || (v.Verdict != string(scannerapi.VerdictActs) && v.Verdict != string(scannerapi.VerdictWaits)) {
		return
	}
	v.Shadow = true
	what := "would act (shadow): its writes are held back and recorded, not done"
	if v.Detail != "" {
		what += "; " + v.Detail
	}
	v.Detail = what
}

// acquire sets the verdict of a scanner that is not enabled or not running
// and answers false; otherwise it answers the running instance.
func acquire(v *Verdict, t Target) (Instance, bool) {
	if !t.Enabled {
		v.Verdict, v.Detail = Disabled, "the scanner is not enabled in the configuration"
		return Instance{}, false
	}
	if t.Acquire == nil {
		v.Verdict, v.Reason = NotRunning, t.State
		v.Detail = "its plugin is " + t.State
		if t.StateReason != "" {
			v.Detail += ": " + t.StateReason
		}
		return Instance{}, false
	}
	inst, err := t.Acquire()
	if err != nil {
		v.Verdict, v.Reason, v.Detail = NotRunning, t.State, err.Error()
		return Instance{}, false
	}
	return inst, true
}

// placed sets the verdict of a scanner that cannot act on the execution
// where it lives (the other store, another partition family, a partition
// another host owns) and answers false.
func placed(v *Verdict, info scannerapi.Info, rep *Report) bool {
	switch {
	case info.UsesPostgres() != (rep.Store == "postgres"):
		v.Verdict, v.Reason, v.Detail = string(scannerapi.VerdictNothing), "other_store", "the scanner works on the other store"
	case info.Family != keys.FamilyFlow:
		v.Verdict, v.Reason = string(scannerapi.VerdictNothing), "other_family"
		v.Detail = fmt.Sprintf("the scanner works on %s partitions, not on executions", info.Family)
	case !rep.Owned && rep.Owner != "":
		v.Verdict, v.Reason = NotOwned, rep.Owner
		v.Detail = fmt.Sprintf("partition %s is owned by host %s, whose scanners act on it", rep.Partition, rep.Owner)
	default:
		return true
	}
	return false
}

// candidates fills req with the entries a cycle would hand the scanner now
// and answers the first one not due yet; it sets the verdict and answers
// false when the lane is not scanned or the read fails.
func candidates(ctx context.Context, v *Verdict, env Env, info scannerapi.Info, eid keys.ExecutionID, t Target,
	rep *Report, req *scannerapi.ScanRequest) (*Entry, bool) {
	if rep.Store == "postgres" {
		cands, err := postgresEntries(ctx, env, info, eid, t.Batch, rep)
		if err != nil {
			v.Verdict, v.Reason, v.Detail = Failed, "read", err.Error()
			return nil, false
		}
		req.Candidates = cands
		return nil, true
	}
	lane := rep.Core["lane_id"]
	if lane != "" && usesLanes(info) && !slices.Contains(env.Lanes, lane) {
		v.Verdict, v.Reason = LaneNotScanned, lane
		v.Detail = fmt.Sprintf("lane %q is not among the lanes this host scans (%s)", lane, strings.Join(env.Lanes, ", "))
		return nil, false
	}
	entries, err := valkeyEntries(ctx, env, info, eid, rep)
	if err != nil {
		v.Verdict, v.Reason, v.Detail = Failed, "read", err.Error()
		return nil, false
	}
	var waits *Entry
	for i := range entries {
		e := &entries[i]
		if e.Due {
			req.Candidates = append(req.Candidates, scannerapi.Candidate{Source: e.Source, Key: e.Key, Member: e.Member, Score: e.Score, Lane: laneOf(info, e)})
		} else if waits == nil {
			waits = e
		}
	}
	return waits, true
}

// notDue is the verdict of an execution whose entries are all still to
// come due.
func notDue(v *Verdict, info scannerapi.Info, waits *Entry, rep *Report) {
	due := time.UnixMilli(int64(waits.Score))
	in := time.Duration(int64(waits.Score)-rep.NowMs) * time.Millisecond
	v.Verdict, v.Reason = string(scannerapi.VerdictWaits), "not_due"
	v.Detail = fmt.Sprintf("its entry in %s is due at %s (in %s)", waits.Key, due.UTC().Format(time.RFC3339Nano), in)
	if offsetOf(info, waits.Source) != 0 {
		// The source's cutoff, not necessarily the scanner's own due
		// time (retention: the floor, then the execution's own).
		v.Detail = fmt.Sprintf("a cycle reads its entry in %s from %s on (in %s); the scanner decides then",
			waits.Key, due.UTC().Format(time.RFC3339), in)
	}
	v.DueAt = &due
}

// scannerVerdict asks the scanner what its next scan does with the
// execution, given the candidates a cycle would hand it.
func scannerVerdict(ctx context.Context, v *Verdict, inst Instance, eid keys.ExecutionID, t Target, rep *Report, req *scannerapi.ScanRequest) {
	e, err := pluginhost.Explain(ctx, asHostScanner(inst.Scanner), inst.Host, &scannerapi.ExplainRequest{Scan: *req, ExecutionID: eid.String()})
	switch {
	case errors.Is(err, scannerapi.ErrNotExplained) && len(req.Candidates) == 0 && rep.Store == "valkey":
		// A scan acts on what its sources hand it, and none holds the
		// execution, its flow or its waitpoint.
		v.Verdict, v.Reason = string(scannerapi.VerdictNothing), "no_entry"
		v.Detail = "none of its sources holds the execution, its flow or its waitpoint"
		return
	case errors.Is(err, scannerapi.ErrNotExplained):
		v.Verdict, v.Detail = NotExplained, "the scanner does not explain its decisions"
		if len(req.Candidates) > 0 {
			v.Detail += fmt.Sprintf("; a cycle now hands it %d entr%s of the execution", len(req.Candidates), plural(len(req.Candidates), "y", "ies"))
		}
		return
	case err != nil:
		v.Verdict, v.Reason, v.Detail = Failed, "explain", err.Error()
		return
	}
	v.From = "scanner"
	v.Verdict, v.Reason, v.Detail, v.BackoffUntilCycle = string(e.Verdict), e.Reason, e.Detail, e.BackoffUntilCycle
	if e.DueAtMs > 0 {
		d := time.UnixMilli(e.DueAtMs)
		v.DueAt = &d
	}
	for _, s := range e.Inconsistent {
		rep.Inconsistent = append(rep.Inconsistent, t.Name+": "+s)
	}
}

// offsetOf is a source's score offset.
func offsetOf(info scannerapi.Info, source string) time.Duration {
	for _, s := range info.Sources {
		if s.Name == source {
			return s.ScoreOffset
		}
	}
	return 0
}

// asHostScanner gives pluginhost.Explain the scanner as the host drives
// it (a launched plugin's scanners and Linked are HostScanners).
func asHostScanner(s scannerapi.Scanner) pluginhost.HostScanner {
	if hs, ok := s.(pluginhost.HostScanner); ok {
		return hs
	}
	return pluginhost.Linked(s, nil)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func usesLanes(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if strings.Contains(s.Key, "{lane}") {
			return true
		}
	}
	return false
}

// laneOf is the lane of a lane-scoped source's entry (its key is
// ff:idx:{tag}:lane:<lane>:<suffix>), "" for other sources.
func laneOf(info scannerapi.Info, e *Entry) string {
	lane := false
	for _, s := range info.Sources {
		lane = lane || s.Name == e.Source && strings.Contains(s.Key, "{lane}")
	}
	if !lane {
		return ""
	}
	if _, rest, ok := strings.Cut(e.Key, ":lane:"); ok {
		if i := strings.LastIndex(rest, ":"); i > 0 {
			return rest[:i]
		}
	}
	return ""
}

// members are the ids a source of an execution's partition may hold for
// it: the execution itself, its flow, its current waitpoint.
func members(rep *Report, eid keys.ExecutionID) []string {
	out := []string{eid.String()}
	for _, f := range []string{"flow_id", "current_waitpoint_id"} {
		if m := rep.Core[f]; m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// valkeyEntries reads the execution's entries in the scanner's sources:
// one key per source (the execution's lane for lane-scoped ones), one
// ZSCORE or SISMEMBER per member, in one pipeline.
func valkeyEntries(ctx context.Context, env Env, info scannerapi.Info, eid keys.ExecutionID, rep *Report) ([]Entry, error) {
	c := env.Valkey
	tag := eid.Partition().Tag()
	type probe struct {
		src    scannerapi.CandidateSource
		key    string
		member string
	}
	var probes []probe
	var cmds valkey.Commands
	for _, s := range info.Sources {
		key := strings.ReplaceAll(s.Key, "{p}", tag)
		if strings.Contains(key, "{lane}") {
			lane := rep.Core["lane_id"]
			if lane == "" {
				continue
			}
			key = strings.ReplaceAll(key, "{lane}", lane)
		}
		for _, m := range members(rep, eid) {
			probes = append(probes, probe{src: s, key: key, member: m})
			if s.Kind == scannerapi.SourceSetScan {
				cmds = append(cmds, c.B().Sismember().Key(key).Member(m).Build())
			} else {
				cmds = append(cmds, c.B().Zscore().Key(key).Member(m).Build())
			}
		}
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	var out []Entry
	for i, r := range c.DoMulti(ctx, cmds...) {
		pr := probes[i]
		e := Entry{Scanner: info.Name, Source: pr.src.Name, Key: pr.key, Member: pr.member}
		if pr.src.Kind == scannerapi.SourceSetScan {
			in, err := r.AsBool()
			if err != nil {
				if valkey.IsValkeyNil(err) {
					continue
				}
				return nil, fmt.Errorf("SISMEMBER %s: %w", pr.key, err)
			}
			if !in {
				continue
			}
			e.Due = true
		} else {
			score, err := r.AsFloat64()
			if valkey.IsValkeyNil(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("ZSCORE %s: %w", pr.key, err)
			}
			e.Score = score
			// A due-time source is read up to now plus its offset (the
			// cycle's ZRANGE ... BYSCORE -inf now+offset); a rotated
			// one is visited whole.
			e.Due = pr.src.Kind != scannerapi.SourceZSetDue || score <= float64(rep.NowMs+pr.src.ScoreOffset.Milliseconds())
			if pr.src.Kind == scannerapi.SourceZSetDue && !e.Due && pr.src.ScoreOffset != 0 {
				e.Score = score - float64(pr.src.ScoreOffset.Milliseconds())
			}
		}
		rep.Entries = append(rep.Entries, e)
		out = append(out, e)
	}
	return out, nil
}

// postgresEntries runs each Postgres source's candidate function for the
// execution's partition, as a cycle does (the same function, batch and
// filter), and keeps the rows that name the execution.
func postgresEntries(ctx context.Context, env Env, info scannerapi.Info, eid keys.ExecutionID, batch int, rep *Report) ([]scannerapi.Candidate, error) {
	var out []scannerapi.Candidate
	u := eid.UUID().String()
	p := eid.Partition()
	for _, s := range info.Sources {
		if s.Kind != scannerapi.SourcePostgres {
			continue
		}
		rows, err := postgres.ReadCandidates(ctx, env.reads().For(s.Key), s.Key, []uint16{p.Index}, nil, env.Partitions.Count(info.Family), batch, env.PostgresFilter)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			if r.Partition != p.Index || !strings.Contains(r.Member, u) {
				continue
			}
			out = append(out, scannerapi.Candidate{Source: s.Name, Key: s.Key, Member: r.Member, Score: float64(r.Score)})
			rep.Entries = append(rep.Entries, Entry{Scanner: info.Name, Source: s.Name, Key: s.Key, Member: r.Member, Score: float64(r.Score), Due: true})
		}
	}
	return out, nil
}

// inconsistencies are what the host sees disagree: a lease in the lease
// index of an execution that is terminal (or gone).
func inconsistencies(rep *Report) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range rep.Entries {
		if seen[e.Key+"\x00"+e.Member] {
			continue
		}
		seen[e.Key+"\x00"+e.Member] = true
		if strings.HasSuffix(e.Key, ":lease_expiry") && e.Member == rep.ExecutionID {
			switch {
			case !rep.Found:
				out = append(out, fmt.Sprintf("%s holds a lease of an execution whose core is gone", e.Key))
			case rep.Core["lifecycle_phase"] == "terminal":
				out = append(out, fmt.Sprintf("%s holds a lease of a terminal execution", e.Key))
			}
		}
	}
	return out
}

// reads are the connections of env's candidate reads.
func (env Env) reads() *postgres.Readers {
	if env.PostgresReads != nil {
		return env.PostgresReads
	}
	return postgres.SharedReaders(env.Postgres)
}
