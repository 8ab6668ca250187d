package retention

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// This file holds the pure decision logic: what an index member is, an
// execution's own retention, whether an examined execution is purged, kept
// or left alone, every key a purge deletes, and how the index is paged. It
// does no I/O.

// retention is the configured retention policy.
type retention struct {
	def time.Duration // for executions without an override
	min time.Duration // the floor: no execution is purged younger than this
}

// maxRetentionMs caps an override (about 292 years is what int64 ms hold;
// anything above a thousand years is "forever" for our purposes).
const maxRetentionMs = 1000 * 365 * 24 * 3600 * 1000

// of returns an execution's retention in ms from its policy JSON (the
// value of GET :policy; hasPolicy false when the key is missing), and
// whether it came from an override. Like FlowFabric, the override is
// stream_policy.retention_ttl_ms as a non-negative integer; anything else
// (absent, null, negative, fractional, a string, unparsable JSON) means the
// default. Unlike FlowFabric the override may be shorter than the default
// as well as longer (pitfall P4); it is never shorter than the floor.
func (r retention) of(policy string, hasPolicy bool) (ms int64, override bool) {
	def := r.def.Milliseconds()
	if !hasPolicy || policy == "" {
		return max(def, r.min.Milliseconds()), false
	}
	var doc struct {
		StreamPolicy *struct {
			RetentionTTLMs json.RawMessage `json:"retention_ttl_ms"`
		} `json:"stream_policy"`
	}
	dec := json.NewDecoder(strings.NewReader(policy))
	if err := dec.Decode(&doc); err != nil || doc.StreamPolicy == nil {
		return max(def, r.min.Milliseconds()), false
	}
	raw := bytes.TrimSpace(doc.StreamPolicy.RetentionTTLMs)
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return max(def, r.min.Milliseconds()), false
	}
	if v > maxRetentionMs {
		v = maxRetentionMs
	}
	return max(int64(v), r.min.Milliseconds()), true
}

// coreFields are read from exec_core when an execution is examined, in
// this order.
var coreFields = []string{"execution_id", "lifecycle_phase", "completed_at", "total_attempt_count", "current_waitpoint_id"}

// examined is what one batched read returned about an execution.
type examined struct {
	inIndex    bool    // ZSCORE found the member in its terminal index
	score      float64 // its score there (the terminal time)
	coreExists bool
	phase      string
	completed  string // completed_at
	attempts   string // total_attempt_count
	waitpoint  string // current_waitpoint_id
	hasPolicy  bool
	policy     string
	edges      []string // deps:all_edges
	waitpoints []string // waitpoints set
	signals    []string // signals zset
	attemptIDs []string // attempts zset
	kept       bool     // the filter keeps it
}

// verdictKind is what happens to an examined execution.
type verdictKind int

const (
	vPurge       verdictKind = iota // past its retention: delete it
	vClean                          // its core is gone: remove the index entries
	vKept                           // not yet due: look again at dueAt
	vNotTerminal                    // not terminal (a stale index entry): never touch
	vFiltered                       // another tenant's: leave it
	vLeft                           // no longer in the index: nothing to do
)

type verdict struct {
	kind  verdictKind
	dueAt int64 // for vKept (ms); saturates at math.MaxInt64
}

// decide is the purge decision for one examined execution at nowMs. The
// execution is purged only when its own core, read in the same batch as
// everything else, says it is terminal and its own retention has passed
// since completed_at (or the index score when completed_at is missing).
// An execution whose core is gone only has its index entries removed,
// whatever the filter says (there is nothing left to attribute to a
// tenant, and nothing to protect).
func decide(e examined, nowMs int64, r retention) verdict {
	switch {
	case !e.inIndex:
		return verdict{kind: vLeft}
	case !e.coreExists:
		return verdict{kind: vClean}
	case !e.kept:
		return verdict{kind: vFiltered}
	case e.phase != "terminal":
		return verdict{kind: vNotTerminal}
	}
	completed, err := strconv.ParseInt(e.completed, 10, 64)
	if err != nil || completed <= 0 {
		completed = int64(e.score)
	}
	ms, _ := r.of(e.policy, e.hasPolicy)
	due := satAdd(completed, ms)
	if nowMs < due {
		return verdict{kind: vKept, dueAt: due}
	}
	return verdict{kind: vPurge}
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// maxAttempts bounds the attempt indexes a purge enumerates; a larger
// total_attempt_count is corruption, not history.
const maxAttempts = 10_000

// purgeKeys is every key of one execution, split in the order they are
// deleted.
type purgeKeys struct {
	// leaves are deleted first, in chunks: everything that is not needed
	// to find other keys.
	leaves []string
	// last is deleted in one command after every leaf is gone: the sets
	// that list the leaves (so a purge that stops half-way can be resumed
	// by reading them again), then the core and the policy.
	last []string
	// nonCanonical counts child ids (edges, waitpoints, signals) whose
	// spelling is not canonical: their keys cannot be named and are left.
	nonCanonical int
}

// errTooManyAttempts is returned for a corrupt attempt count.
type errTooManyAttempts struct{ n string }

func (e errTooManyAttempts) Error() string { return "total_attempt_count " + e.n + " is implausible" }

// keysOf lists every key of the execution: its own keys (payload, result,
// tags, lease current and history, claim grant, suspension and its
// composite sets, dependency meta, unresolved and edge sets with every dep
// edge, waitpoints with each waitpoint's hash, signal stream and condition,
// signals with each signal's hash and payload, attempts with each attempt's
// hash, usage, policy, summary, stream and stream meta), then the core and
// policy. FlowFabric's purge leaves the attempt summaries and the composite
// suspension sets behind (P4); we delete them.
func keysOf(id keys.ExecutionID, e examined) (purgeKeys, error) {
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	var out purgeKeys

	attempts := map[uint32]bool{}
	if e.attempts != "" {
		n, err := strconv.ParseUint(e.attempts, 10, 32)
		if err != nil || n > maxAttempts {
			return purgeKeys{}, errTooManyAttempts{e.attempts}
		}
		for i := uint32(0); i < uint32(n); i++ {
			attempts[i] = true
		}
	}
	for _, a := range e.attemptIDs {
		if n, err := strconv.ParseUint(a, 10, 32); err == nil && n <= maxAttempts && strconv.FormatUint(n, 10) == a {
			attempts[uint32(n)] = true
		}
	}
	idx := make([]uint32, 0, len(attempts))
	for i := range attempts {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		out.leaves = append(out.leaves, ek.Attempt(i), ek.AttemptUsage(i), ek.AttemptPolicy(i),
			ek.AttemptSummary(i), ek.Stream(i), ek.StreamMeta(i))
	}
	for _, edge := range e.edges {
		if u, ok := canonicalUUID(edge); ok {
			out.leaves = append(out.leaves, ek.Dep(u))
		} else {
			out.nonCanonical++
		}
	}
	wps := append([]string(nil), e.waitpoints...)
	if e.waitpoint != "" {
		wps = append(wps, e.waitpoint)
	}
	seenWP := map[string]bool{}
	for _, w := range wps {
		if seenWP[w] {
			continue
		}
		seenWP[w] = true
		if u, ok := canonicalUUID(w); ok {
			out.leaves = append(out.leaves, pk.Waitpoint(u), pk.WaitpointSignals(u), pk.WaitpointCondition(u))
		} else {
			out.nonCanonical++
		}
	}
	for _, s := range e.signals {
		if u, ok := canonicalUUID(s); ok {
			out.leaves = append(out.leaves, pk.Signal(u), pk.SignalPayload(u))
		} else {
			out.nonCanonical++
		}
	}
	out.leaves = append(out.leaves,
		ek.Payload(), ek.Result(), ek.Tags(), ek.LeaseCurrent(), ek.LeaseHistory(), ek.ClaimGrant(),
		ek.SuspensionCurrent(), ek.SuspensionSatisfiedSet(), ek.SuspensionSatisfiedSignals(), ek.SuspensionMemberMap(),
		ek.DepsMeta(), ek.DepsUnresolved())
	out.last = []string{ek.DepsAllEdges(), ek.Waitpoints(), ek.Signals(), ek.Attempts(), ek.Core(), ek.Policy()}
	return out, nil
}

// canonicalUUID parses an id stored in one of the execution's sets; only
// the canonical spelling names the keys it was stored under.
func canonicalUUID(s string) (keys.UUID, bool) {
	u, err := keys.ParseUUID(s)
	if err != nil || u.String() != s {
		return keys.UUID{}, false
	}
	return u, true
}

// chunks splits keys into groups of at most n.
func chunks(ks []string, n int) [][]string {
	var out [][]string
	for len(ks) > 0 {
		c := min(n, len(ks))
		out = append(out, ks[:c])
		ks = ks[c:]
	}
	return out
}

// strings of an array reply (SMEMBERS, ZRANGE); ok is false for anything
// else. A nil reply is an empty list.
func replyStrings(r scannerapi.Reply) ([]string, bool) {
	if r.Failed() {
		return nil, false
	}
	if r.IsNil() {
		return nil, true
	}
	if r.Kind != scannerapi.KindArray {
		return nil, false
	}
	out := make([]string, 0, len(r.Array))
	for _, e := range r.Array {
		s, ok := e.Text()
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
