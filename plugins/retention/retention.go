// Package retention is the retention_trimmer scanner (scanners.md §8.2):
// it deletes terminal executions once their retention has passed, every key
// of them, and their index entries.
//
// # Finding what is due, including shorter per-execution retentions
//
// The candidates are the members of ff:idx:{fp:N}:lane:<lane>:terminal,
// scored by the time each execution ended. Retention is default_retention
// (24 h) unless the execution's :policy JSON says
// stream_policy.retention_ttl_ms; that override may be longer or, unlike
// FlowFabric (pitfall P4), shorter, down to the floor min_retention (1 h):
// nothing is purged younger than the floor.
//
// FlowFabric reads only entries older than the 24 h default, so a shorter
// override is never seen. Reading everything older than the floor instead
// does not work either: ordered by age, the oldest entries come first, and
// in a steady state those are default-retention executions a little short
// of 24 h old; an execution with a two-hour override sits behind all of
// them. So the index is split at the two cutoffs and read two ways:
//
//   - The head: entries older than now - default_retention. All of them are
//     due except those with a longer override. The host reads the head of
//     every lane (zset_due, lowest scores first, batch per lane; its cutoff
//     is the fixed floor of one minute because Info cannot depend on
//     options, and entries younger than the default cutoff in that window
//     are ignored here).
//   - The walk: entries between the two cutoffs, read forward from a
//     per-lane cursor a page at a time (at most "lookahead" entries per
//     scan), each classified by its policy alone (one GET) once, when it
//     becomes older than the floor. One with an override is remembered with
//     its due time; one without is forgotten, the head will reach it. The
//     cursor only moves forward, so each execution is walked once, not
//     once per sweep. A restarted plugin starts the walk again at the
//     default cutoff.
//
// Remembered executions whose due time has come are examined when their
// partition is scanned next (their entry is older than the floor, so the
// host has candidates for that partition).
//
// # Head-of-line blocking (pitfall P3)
//
// Entries left in place keep their score: longer overrides, another
// tenant's executions (filter), stale entries of executions that are not
// terminal, entries backed off after repeated failures. Each is remembered
// (with its due time, or for ten cycles) and skipped without reads; when a
// lane's host window is full and holds such entries, the scan reads further
// pages of the head past them (ZRANGE BYSCORE, at most "lookahead" entries,
// resuming at a per-lane cursor) until it has a batch of entries to act on.
//
// # Purging one execution
//
// One batched read per stage, for every execution of the partition at once:
// ZSCORE of its index entry, HMGET of its core (lifecycle_phase,
// completed_at, total_attempt_count, current_waitpoint_id), GET policy,
// SMEMBERS deps:all_edges and waitpoints, ZRANGE signals and attempts, and
// the filter's reads. An execution is purged only if that same read says it
// is terminal and past its own retention (counted from completed_at); a
// non-terminal execution is never touched. The delete list (see keysOf) is
// every key of the execution; the keys are removed with UNLINK in commands
// of at most 100 keys (UNLINK frees large values off the main thread, so no
// command blocks the server for long), many commands pipelined per Exec.
// The sets that list other keys, the core and the policy go last, in one
// command, and only after every other key is gone: a purge cut short by a
// crash or an error leaves the execution findable and is redone from the
// start next time. Then the index entries: ZREM from the lane's terminal
// index and SREM from all_executions. An entry whose core is already gone
// (a purge cut short after the core) gets just those two, ZREM and SREM.
//
// # Throughput
//
// FlowFabric purges at most 20 executions per lane per partition per
// minute (P4). Here a scan reports More while it is making progress and a
// window was full (or a look-ahead or the walk has entries left), so the
// host rescans the partition at once; the batch is per lane.
//
// # Results
//
// Processed counts executions purged plus index entries of vanished
// executions removed. Skipped counts entries examined or remembered and
// left in place (not yet due, filtered, not terminal, backed off). Errors
// count failed reads and deletes by class and code, invalid members by
// code. The backlog (BacklogPlugin) is the number of terminal entries older
// than now - default_retention: what is due by the default, plus what
// longer overrides keep.
package retention

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name is the scanner's name.
const Name = "retention_trimmer"

// Version is the scanner's version.
const Version = "1.0.0"

// Defaults and limits.
const (
	DefaultInterval     = 60 * time.Second
	DefaultBatch        = 50
	DefaultRetention    = 24 * time.Hour
	DefaultMinRetention = time.Hour
	// Floor is the host's candidate cutoff (Info cannot depend on
	// options), and so the smallest min_retention accepted.
	Floor = time.Minute
	// DefaultLookahead bounds the entries read per lane per scan by the
	// head look-ahead, and separately by the walk.
	DefaultLookahead = 500
	// DeleteChunk is the most keys one UNLINK carries.
	DeleteChunk = 100
)

// Option names.
const (
	OptionDefaultRetention = "default_retention"
	OptionMinRetention     = "min_retention"
	OptionLookahead        = "lookahead"
)

const (
	sourceName  = "terminal"
	stuckCycles = 10
	memoLimit   = 200_000
	execChunk   = 4000
	pageSize    = 200
)

// Scanner is the retention_trimmer scanner. Its methods are safe for
// concurrent use by different partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker

	memo  *scanutil.Memory[memo]    // (partition, execution id, score) -> what is known of an entry left in place
	walks scanutil.Cursors[laneKey] // where each lane's walk between the cutoffs resumes
	heads scanutil.Cursors[laneKey] // where each lane's look-ahead past the host's window resumes

	mu    sync.Mutex
	cfg   config
	lanes map[string]bool // lanes seen in requests, for SampleBacklog
}

type config struct {
	filter    scannerapi.Filter
	ret       retention
	lookahead int
}

type laneKey struct {
	part uint16
	lane string
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{
		failures: scannerapi.NewFailureTracker(),
		cfg:      config{ret: retention{def: DefaultRetention, min: DefaultMinRetention}, lookahead: DefaultLookahead},
		memo:     scanutil.NewMemory[memo](memoLimit),
		lanes:    map[string]bool{},
	}
}

// Info implements scannerapi.Scanner.
func (s *Scanner) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:            Name,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyFlow,
		DefaultInterval: DefaultInterval,
		DefaultBatch:    DefaultBatch,
		Sources: []scannerapi.CandidateSource{{
			Name:        sourceName,
			Kind:        scannerapi.SourceZSetDue,
			Key:         "ff:idx:{p}:lane:{lane}:terminal",
			ScoreOffset: -Floor,
			Backlog:     scannerapi.BacklogPlugin,
		}},
		// HGET: filter. HMGET, GET, SMEMBERS, ZRANGE, ZSCORE: what an
		// execution is and which keys it has; ZRANGE also pages the index.
		// ZCOUNT, TIME, SMEMBERS of ff:idx:lanes: the backlog. UNLINK,
		// ZREM, SREM: the purge.
		Commands: []string{"HGET", "HMGET", "GET", "SMEMBERS", "ZRANGE", "ZSCORE", "ZCOUNT", "TIME", "UNLINK", "ZREM", "SREM"},
		// UNLINK: an expired execution's own keys (see keysOf); ZREM and
		// SREM: its index entries.
		KeyScopes: []scannerapi.KeyScope{
			{Command: "UNLINK", Patterns: []string{"ff:exec:{fp:*}:*", "ff:attempt:{fp:*}:*", "ff:stream:{fp:*}:*",
				"ff:wp:{fp:*}:*", "ff:signal:{fp:*}:*"}},
			{Command: "ZREM", Patterns: []string{"ff:idx:{fp:*}:lane:*:terminal"}},
			{Command: "SREM", Patterns: []string{"ff:idx:{fp:*}:all_executions"}},
		},
		Options: append(scannerapi.FilterOptions(),
			scannerapi.OptionSpec{Name: OptionDefaultRetention, Type: scannerapi.OptionDuration, Default: DefaultRetention.String(),
				Description: "retention of executions whose policy sets no stream_policy.retention_ttl_ms"},
			scannerapi.OptionSpec{Name: OptionMinRetention, Type: scannerapi.OptionDuration, Default: DefaultMinRetention.String(),
				Description: "nothing is purged younger than this, whatever its policy says (at least " + Floor.String() + ")"},
			scannerapi.OptionSpec{Name: OptionLookahead, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultLookahead),
				Description: "index entries read per lane per scan past a window of entries left in place, and by the walk that finds shorter overrides (0: off)"},
		),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	o, err := scanutil.ParseOptions(s.Info().Options, options)
	if err != nil {
		return err
	}
	var cfg config
	if cfg.filter, err = scannerapi.ParseFilter(o.Map()); err != nil {
		return err
	}
	if cfg.ret.min, err = o.Duration(OptionMinRetention, Floor); err != nil {
		return fmt.Errorf("%w (the floor: the host's candidate cutoff)", err)
	}
	if cfg.ret.def, err = o.Duration(OptionDefaultRetention, cfg.ret.min); err != nil {
		return fmt.Errorf("%w (%s)", err, OptionMinRetention)
	}
	if cfg.lookahead, err = o.Int(OptionLookahead, 0, 1_000_000); err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = cfg
	s.mu.Unlock()
	// Due times and stuck verdicts were computed under the old options.
	s.dropDerived()
	scannerapi.Logger(ctx).Info("configured", "filter", cfg.filter.String(), "default_retention", cfg.ret.def,
		"min_retention", cfg.ret.min, "lookahead", cfg.lookahead)
	return nil
}

// dropDerived forgets everything the scanner derived from the store.
func (s *Scanner) dropDerived() {
	s.memo.Reset()
	s.walks.Reset()
	s.heads.Reset()
}
