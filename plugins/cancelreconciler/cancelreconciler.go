// Package cancelreconciler is the cancel_reconciler scanner (scanners.md
// §10.2): the safety net for the member cancels of a flow cancelled with
// policy cancel_all. ff_cancel_flow puts every member in the flow's
// pending_cancels set and the flow in ff:idx:{fp:N}:cancel_backlog, scored
// by the end of its grace window; the live dispatch (or
// client.DrainFlowCancels) cancels and acknowledges members during the
// grace; whatever is still owed afterwards is done here.
//
// # One scan
//
// The host reads the due head of the backlog (lowest scores first, up to
// the batch of 50 flows) and calls ScanPartition for partitions with due
// flows. The scan then runs four pipelined stages, each ONE Exec for every
// flow of the partition (split only above the host's batch limit):
//
//  1. per flow: EXISTS flow core, SRANDMEMBER pending_cancels 500, HGET
//     cancel_reason. A flow whose core is gone gets DEL pending_cancels and
//     ZREM from the backlog; a flow with nothing pending is removed from the
//     backlog; an unparsable flow id is removed and counted.
//  2. per member: HMGET of its core (lane_id, current_attempt_index,
//     current_waitpoint_id, current_worker_instance_id, plus execution_id
//     and lifecycle_phase) and, with a namespace or instance-tag filter, the
//     filter's reads. Garbage member ids are acknowledged (that is, SREMed
//     through ff_ack_cancel_member) and counted.
//  3. ff_cancel_execution for every member kept, with the keys of its real
//     lane, attempt, waitpoint and worker (21 KEYS), ARGV [eid, reason,
//     "operator_override", "", ""].
//  4. ff_ack_cancel_member for every member that is done.
//
// A cancel is done when it succeeded or its Lua code is execution_not_active
// (the member had ended) or execution_not_found (it is gone). That is
// FlowFabric's stated intent; its Valkey path turned those codes into
// transport errors and retried them forever (pitfall P6). A member whose core
// is missing is acknowledged without a cancel (the library would answer
// execution_not_found). Any other Lua code is counted by code (class lua),
// failed commands by class, and both feed a FailureTracker: a member that
// fails three cycles in a row is left alone for ten, without holding up the
// other members or flows. A member whose existing core has no lane is
// corruption: it is counted (invalid, missing_lane) and skipped, never
// cancelled with a guessed lane.
//
// # Flows that cannot finish (pitfall P3)
//
// A flow leaves the backlog only when its last owed member is acknowledged.
// Members this scanner must leave alone (another tenant's, per the filter;
// backed off; corrupt) keep their flow in the backlog with its old score, so
// a head window of such flows would hide every flow behind it, and
// FlowFabric re-reads the same 50 every cycle. Here a flow on which a scan
// made no progress is remembered, with its score, as stuck for ten cycles
// and skipped without reads; when the host's window is full and holds stuck
// flows, the scan reads further pages of the due backlog (ZRANGE BYSCORE,
// at most "lookahead" entries per scan, resuming at a per-partition cursor
// when one scan cannot get past them all) until it has a batch of flows it
// can work on. Changing the options forgets the stuck set.
//
// More is reported only when the scan made progress and there is work left
// that it saw or could not see: a flow that had more pending members than
// one scan takes, a full host window, a look-ahead that ran out of budget
// with flows left. A partition whose due flows are all stuck says no More,
// so the host does not spin on it.
//
// # Results
//
// Processed counts members acknowledged (cancelled, already ended or gone)
// plus flows removed from the backlog because the flow itself is gone.
// Skipped counts flows skipped as stuck or backed off, and members left
// pending on purpose (filtered, backed off). The backlog gauge is the host's
// ZCARD of the backlog (every entry, also those still in their grace), as
// FlowFabric's ff_cancel_backlog_depth; the host writes it only from cycles
// that sampled every partition (P8).
package cancelreconciler

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name is the scanner's name.
const Name = "cancel_reconciler"

// Version is the scanner's version.
const Version = "1.0.0"

// Library functions the scanner calls.
const (
	FunctionCancel = "ff_cancel_execution"
	FunctionAck    = "ff_ack_cancel_member"
)

// Defaults and limits.
const (
	DefaultInterval = 15 * time.Second
	DefaultBatch    = 50
	// DefaultMembersPerFlow is how many pending members of one flow a scan
	// takes (SRANDMEMBER count).
	DefaultMembersPerFlow = 500
	MaxMembersPerFlow     = 10000
	// DefaultLookahead bounds the backlog entries read past the host's
	// window per scan when it holds stuck flows.
	DefaultLookahead = 500
	// DefaultReason is the cancel reason when the flow has none recorded.
	DefaultReason = "flow_cancelled"
	// Source is the cancel source: like FlowFabric's reconciler, an
	// operator override (lease checks are skipped, the completion is
	// published).
	Source = "operator_override"
)

// Option names.
const (
	OptionLookahead      = "lookahead"
	OptionMembersPerFlow = "members_per_flow"
)

const (
	sourceName = "cancel_backlog"
	// stuckCycles is how long a flow without progress is skipped.
	stuckCycles = 10
	// stuckLimit bounds the memory of stuck flows.
	stuckLimit = 100_000
	// execChunk bounds the commands of one Exec, well below
	// scannerapi.MaxExecBatch so one callback stays short.
	execChunk = 4000
	// flowKeyPrefix marks flow entries in the failure tracker (members are
	// keyed by their execution id).
	flowKeyPrefix = "flow:"
)

// Scanner is the cancel_reconciler scanner. Its methods are safe for
// concurrent use by different partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker
	stuck    *scanutil.Memory[struct{}] // backlog entries (flow, score) left in place without progress
	cursors  scanutil.Cursors[uint16]   // partition -> where the next look-ahead resumes

	mu  sync.Mutex
	cfg config
}

type config struct {
	filter    scannerapi.Filter
	lookahead int
	members   int
}

// New returns a scanner with default options.
func New() *Scanner {
	return &Scanner{
		failures: scannerapi.NewFailureTracker(),
		stuck:    scanutil.NewMemory[struct{}](stuckLimit),
		cfg:      config{lookahead: DefaultLookahead, members: DefaultMembersPerFlow},
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
			Name:    sourceName,
			Kind:    scannerapi.SourceZSetDue,
			Key:     "ff:idx:{p}:cancel_backlog",
			Backlog: scannerapi.BacklogSize,
		}},
		// EXISTS, SRANDMEMBER, HGET: flow reads (HGET also the filter's).
		// HMGET: member cores. ZRANGE: look-ahead pages. ZREM, DEL: backlog
		// entries of unparsable or vanished flows, and a vanished flow's
		// pending_cancels.
		Commands: []string{"EXISTS", "SRANDMEMBER", "HGET", "HMGET", "ZRANGE", "ZREM", "DEL"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "ZREM", Patterns: []string{"ff:idx:{fp:*}:cancel_backlog"}},
			{Command: "DEL", Patterns: []string{"ff:flow:{fp:*}:*:pending_cancels"}},
		},
		Functions: []string{FunctionCancel, FunctionAck},
		FunctionScopes: []scannerapi.FunctionScope{
			scanutil.CancelScope(),
			// The flow's pending_cancels and the partition's backlog.
			{Function: FunctionAck, Patterns: scanutil.ScopePatterns(nil,
				keys.FlowIn(keys.Partition{Family: keys.FamilyFlow}, keys.FlowIDFrom(scanutil.AnyUUID())).PendingCancels(),
				keys.FlowPart(keys.Partition{Family: keys.FamilyFlow}).CancelBacklog())},
		},
		Options: append(scannerapi.FilterOptions(),
			scannerapi.OptionSpec{Name: OptionLookahead, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultLookahead),
				Description: "backlog entries read past the host's window per scan when it holds stuck flows (0: off)"},
			scannerapi.OptionSpec{Name: OptionMembersPerFlow, Type: scannerapi.OptionInt, Default: strconv.Itoa(DefaultMembersPerFlow),
				Description: "pending members of one flow cancelled per scan (1.." + strconv.Itoa(MaxMembersPerFlow) + ")"},
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
	if cfg.lookahead, err = o.Int(OptionLookahead, 0, 1_000_000); err != nil {
		return err
	}
	if cfg.members, err = o.Int(OptionMembersPerFlow, 1, MaxMembersPerFlow); err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = cfg
	s.mu.Unlock()
	// What was stuck under the old options (a filter) may not be now.
	s.dropDerived()
	scannerapi.Logger(ctx).Info("configured", "filter", cfg.filter.String(), "lookahead", cfg.lookahead, "members_per_flow", cfg.members)
	return nil
}

// dropDerived forgets everything the scanner derived from the store.
func (s *Scanner) dropDerived() {
	s.stuck.Reset()
	s.cursors.Reset()
}
