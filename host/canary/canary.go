// Package canary compares two versions of a scanner decision by
// decision. A canary is a new plugin binary started in shadow beside the
// running one: the scheduler hands every partition it scans to the
// canary first (its writes held back) and then to the running version
// (its writes run), with the same request, so both decide on the same
// state. The callback service tells this package of every write either
// one decided on (callbacks.Policy.WithTap); at the end of each cycle
// the two sets are compared item by item.
//
// An item is what a write acts on: its keys (an execution's keys for an
// FCALL, a key for a plain command), or for a PGCALL, which names no
// key, its arguments. Per item the comparison finds the same decisions,
// decisions only the new version would make, decisions only the running
// one makes, or decisions that differ (another function or other
// arguments on the same item).
package canary

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/shadow"
)

// The kinds of a difference.
const (
	OnlyNew = "only_new" // the canary would act; the running version does not
	OnlyOld = "only_old" // the running version acts; the canary would not
	Differ  = "differ"   // both act on the item, differently
)

// The states of a canary.
const (
	// Comparing: the canary runs beside the running version.
	Comparing = "comparing"
	// Promoting: it is being swapped in.
	Promoting = "promoting"
	// Promoted: it serves; the old version was swapped out.
	Promoted = "promoted"
	// Aborted: it was stopped; the running version never changed.
	Aborted = "aborted"
	// Failed: it could not be started or promoted; the running version
	// keeps serving.
	Failed = "failed"
)

// MaxItems bounds the items one cycle's comparison holds per side; a
// cycle with more is counted as not compared (and never promotes).
const MaxItems = 100_000

// Version names one side.
type Version struct {
	SHA256  string `json:"sha256"`
	Version string `json:"version,omitempty"`
}

// Diff is one item the two versions decided differently.
type Diff struct {
	At    time.Time `json:"at"`
	Cycle uint64    `json:"cycle"`
	Kind  string    `json:"kind"`
	// Item is what the decisions act on (keys, or a PGCALL's arguments).
	Item string `json:"item"`
	// Old and New are each side's decisions on it (command and
	// arguments), empty on the side that makes none.
	Old []string `json:"old,omitempty"`
	New []string `json:"new,omitempty"`
	// Seen counts the cycles it differed in (At and Cycle are the
	// latest).
	Seen uint64 `json:"seen"`
}

// Status is a canary as status, the console and the CLI show it.
type Status struct {
	State   string    `json:"state"`
	From    Version   `json:"from"`
	To      Version   `json:"to"`
	Started time.Time `json:"started"`
	// Cycles counts the cycles compared; Clean the latest of them in a
	// row without a difference; WithDifference those with one; Unsure
	// those not compared in full (a canary call failed, or too many
	// items).
	Cycles         uint64 `json:"cycles"`
	Clean          uint64 `json:"clean_cycles"`
	WithDifference uint64 `json:"cycles_with_difference"`
	Unsure         uint64 `json:"cycles_not_compared"`
	// Items counts the items compared by outcome: same, only_new,
	// only_old, differ.
	Items map[string]uint64 `json:"items"`
	// PromoteAfter is how many clean cycles in a row promote it on their
	// own (0: only an operator).
	PromoteAfter int `json:"promote_after"`
	// Reason says why it ended (or why it is not promoted).
	Reason string    `json:"reason,omitempty"`
	Ended  time.Time `json:"ended,omitzero"`
	// Latest are the latest differences, newest first.
	Latest []Diff `json:"latest,omitempty"`
}

// Differences is the number of items that differed.
func (s Status) Differences() uint64 {
	return s.Items[OnlyNew] + s.Items[OnlyOld] + s.Items[Differ]
}

// Active says the canary still runs beside the running version.
func (s Status) Active() bool { return s.State == Comparing || s.State == Promoting }

// Comparison is one canary's comparison with the running version. Safe
// for concurrent use.
type Comparison struct {
	clk  clock.Clock
	keep int

	mu sync.Mutex
	// This cycle's decisions per item, each side.
	old, new  map[string][]string
	overflow  bool
	canaryBad bool
	st        Status
	// ring holds the latest differences, one per item and kind; index
	// finds an item's.
	ring  []Diff
	index map[string]int
}

// New starts a comparison of to against from; it keeps the latest keep
// differences (<= 0: shadow.Keep) and promotes itself after promoteAfter
// clean cycles (0: never on its own).
func New(clk clock.Clock, from, to Version, keep, promoteAfter int) *Comparison {
	if keep <= 0 {
		keep = shadow.Keep
	}
	c := &Comparison{clk: clock.Or(clk), keep: min(keep, shadow.MaxKeep), old: map[string][]string{}, new: map[string][]string{}, index: map[string]int{}}
	c.st = Status{State: Comparing, From: from, To: to, Started: c.clk.Now(), PromoteAfter: max(promoteAfter, 0),
		Items: map[string]uint64{"same": 0, OnlyNew: 0, OnlyOld: 0, Differ: 0}}
	return c
}

// item is a decision's item and its entry (what is done to the item).
func item(d shadow.Decision) (string, string) {
	cmd, keys, moreKeys, args, moreArgs := d.Bounded()
	if memberCommands[cmd] && len(keys) == 1 && len(args) > 0 {
		// A member of a shared collection (an index, a set of
		// executions) is the item, not the collection.
		return keys[0] + " " + strings.Join(args, " "), cmd
	}
	entry := strings.Join(append([]string{cmd}, args...), " ")
	if moreArgs > 0 {
		entry += " …"
	}
	if len(keys) == 0 {
		return strings.Join(args, " "), cmd
	}
	it := strings.Join(keys, " ")
	if moreKeys > 0 {
		it += " …"
	}
	return it, entry
}

// memberCommands name their items by members of a collection.
var memberCommands = map[string]bool{"ZREM": true, "SREM": true, "HDEL": true, "SADD": true}

func (c *Comparison) add(side map[string][]string, d shadow.Decision) {
	it, entry := item(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := side[it]; !ok && len(side) >= MaxItems {
		c.overflow = true
		return
	}
	side[it] = append(side[it], entry)
}

// Running records a decision of the running version.
func (c *Comparison) Running(d shadow.Decision) { c.add(c.old, d) }

// Canary records a decision of the canary.
func (c *Comparison) Canary(d shadow.Decision) { c.add(c.new, d) }

// CanaryFailed notes that a canary call failed this cycle: the cycle is
// not compared in full.
func (c *Comparison) CanaryFailed() {
	c.mu.Lock()
	c.canaryBad = true
	c.mu.Unlock()
}

// StartCycle starts a cycle's comparison: decisions told before it (a
// call of a sweep the canary was not part of) are dropped.
func (c *Comparison) StartCycle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.old, c.new, c.overflow, c.canaryBad = map[string][]string{}, map[string][]string{}, false, false
}

// SetTo names the canary's version once its plugin told it.
func (c *Comparison) SetTo(v Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.To = v
}

// Resume puts a canary whose promotion failed back to comparing, saying
// why; the count of clean cycles starts again.
func (c *Comparison) Resume(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.State, c.st.Reason, c.st.Clean = Comparing, reason, 0
	// A failed automatic promotion is not tried again on its own.
	c.st.PromoteAfter = 0
}

// EndCycle compares the cycle's decisions and starts the next cycle's.
// It returns true once, when the canary has earned its automatic
// promotion (PromoteAfter clean cycles in a row and no difference ever).
func (c *Comparison) EndCycle(cycle uint64) (promote bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.State != Comparing {
		c.old, c.new = map[string][]string{}, map[string][]string{}
		return false
	}
	now := c.clk.Now()
	c.st.Cycles++
	differed := false
	for _, it := range union(c.old, c.new) {
		o, n := c.old[it], c.new[it]
		slices.Sort(o)
		slices.Sort(n)
		kind := ""
		switch {
		case slices.Equal(o, n):
			c.st.Items["same"]++
			continue
		case len(o) == 0:
			kind = OnlyNew
		case len(n) == 0:
			kind = OnlyOld
		default:
			kind = Differ
		}
		differed = true
		c.st.Items[kind]++
		c.remember(Diff{At: now, Cycle: cycle, Kind: kind, Item: it, Old: o, New: n})
	}
	switch {
	case differed:
		c.st.WithDifference++
		c.st.Clean = 0
	case c.overflow || c.canaryBad:
		c.st.Unsure++
		c.st.Clean = 0
	default:
		c.st.Clean++
	}
	c.old, c.new, c.overflow, c.canaryBad = map[string][]string{}, map[string][]string{}, false, false
	if c.st.PromoteAfter > 0 && c.st.WithDifference == 0 && c.st.Clean >= uint64(c.st.PromoteAfter) {
		c.st.State = Promoting
		c.st.Reason = "promoted after " + strconv.FormatUint(c.st.Clean, 10) + " cycles without a difference"
		return true
	}
	return false
}

// remember keeps d among the latest differences: one entry per item and
// kind, its Seen counting the cycles it came back in, the least recently
// seen dropped past keep.
func (c *Comparison) remember(d Diff) {
	k := d.Kind + "\x00" + d.Item
	if i, ok := c.index[k]; ok {
		d.Seen = c.ring[i].Seen + 1
		c.ring[i] = d
		return
	}
	d.Seen = 1
	if len(c.ring) < c.keep {
		c.index[k] = len(c.ring)
		c.ring = append(c.ring, d)
		return
	}
	oldest := 0
	for i := range c.ring {
		if c.ring[i].At.Before(c.ring[oldest].At) || (c.ring[i].At.Equal(c.ring[oldest].At) && c.ring[i].Cycle < c.ring[oldest].Cycle) {
			oldest = i
		}
	}
	delete(c.index, c.ring[oldest].Kind+"\x00"+c.ring[oldest].Item)
	c.index[k] = oldest
	c.ring[oldest] = d
}

// Begin marks an operator's promotion; it fails (false) unless the canary
// is comparing.
func (c *Comparison) Begin(reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.State != Comparing && c.st.State != Promoting {
		return false
	}
	c.st.State, c.st.Reason = Promoting, reason
	return true
}

// End records how the canary ended (Promoted, Aborted, Failed) and why.
func (c *Comparison) End(state, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.State, c.st.Reason, c.st.Ended = state, reason, c.clk.Now()
}

// Status returns the counts and the latest n differences (n <= 0: all
// kept), newest first.
func (c *Comparison) Status(n int) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.Items = make(map[string]uint64, len(c.st.Items))
	for k, v := range c.st.Items {
		s.Items[k] = v
	}
	if n <= 0 || n > len(c.ring) {
		n = len(c.ring)
	}
	latest := slices.Clone(c.ring)
	slices.SortStableFunc(latest, func(a, b Diff) int {
		if a.Cycle != b.Cycle {
			return cmpDesc(a.Cycle, b.Cycle)
		}
		return strings.Compare(a.Item, b.Item)
	})
	s.Latest = latest[:n]
	return s
}

func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func union(a, b map[string][]string) []string {
	out := make([]string, 0, len(a)+len(b))
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Tap is a scanner's link between the callback service and its canary
// comparison: both versions' command policies carry one of its sides
// for the scanner's life, and decisions reach a comparison only while
// one is set.
type Tap struct {
	cur atomic.Pointer[Comparison]
}

// Set makes c the comparison the tap feeds (nil: none).
func (t *Tap) Set(c *Comparison) { t.cur.Store(c) }

// Comparison is the comparison the tap feeds, if any.
func (t *Tap) Comparison() *Comparison { return t.cur.Load() }

// Running is the running version's side (callbacks.Policy.WithTap).
func (t *Tap) Running(d shadow.Decision) {
	if c := t.cur.Load(); c != nil {
		c.Running(d)
	}
}

// Canary is the canary's side.
func (t *Tap) Canary(d shadow.Decision) {
	if c := t.cur.Load(); c != nil {
		c.Canary(d)
	}
}

// Taps are a host's taps, one per scanner name.
type Taps struct {
	mu sync.Mutex
	m  map[string]*Tap
}

// For returns scanner name's tap, made on first use.
func (ts *Taps) For(name string) *Tap {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m == nil {
		ts.m = map[string]*Tap{}
	}
	t := ts.m[name]
	if t == nil {
		t = &Tap{}
		ts.m[name] = t
	}
	return t
}
