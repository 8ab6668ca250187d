// Package shadow records what a scanner in shadow mode would have done.
// A scanner runs in shadow (scanners.NAME.mode: shadow) like any other:
// its plugin scans every cycle and sends its batches; the callback
// service runs what only reads and holds back every command that would
// write (a write command, an FCALL of a function the library does not
// flag no-writes, a PGCALL), answering it with a refusal ("shadow") and
// recording it here. The log is what status, the metrics and the console
// show: how many writes were held back, and the latest of them.
package shadow

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/internal/plaintext"
)

// Keep is how many of the latest held-back commands a log keeps unless
// configured otherwise (decision_records.shadow).
const Keep = 100

// MaxKeep bounds a configured ring: the records are for an operator to
// read, and each costs up to a few KiB.
const MaxKeep = 10000

// Bounds of one recorded decision: the keys it keeps (the rest are
// counted), the arguments it keeps, and the bytes of each.
const (
	maxKeys    = 8
	maxArgs    = 16
	maxKeyLen  = 256
	maxArgLen  = 128
	maxCommand = 128
)

// Decision is one write a scanner decided on: the command (FCALL and
// PGCALL with the function), its keys and its arguments after the keys,
// as the plugin sent them. The canary comparison (host/canary) compares
// two versions' decisions; the shadow log keeps the latest of them.
type Decision struct {
	Command string
	Keys    []string
	Args    []string
}

// Bounded is d cut to what a record keeps: the command, at most maxKeys
// keys and maxArgs arguments, each one bounded line of the plugin's
// text, and how many of each were left out.
func (d Decision) Bounded() (cmd string, keys []string, moreKeys int, args []string, moreArgs int) {
	cmd = plaintext.Line(d.Command, maxCommand)
	for i, k := range d.Keys {
		if i == maxKeys {
			moreKeys = len(d.Keys) - maxKeys
			break
		}
		keys = append(keys, plaintext.Line(k, maxKeyLen))
	}
	for i, a := range d.Args {
		if i == maxArgs {
			moreArgs = len(d.Args) - maxArgs
			break
		}
		args = append(args, plaintext.Line(a, maxArgLen))
	}
	return cmd, keys, moreKeys, args, moreArgs
}

// Item is one command held back: what the scanner would have done.
type Item struct {
	At time.Time `json:"at"`
	// Command is the command, or FCALL/PGCALL and the function.
	Command string `json:"command"`
	// Keys are the keys it names (at most 8; MoreKeys counts the rest).
	Keys     []string `json:"keys,omitempty"`
	MoreKeys int      `json:"more_keys,omitempty"`
	// Args is how many arguments followed the keys; Values are the
	// first of them (at most 16, each cut to 128 bytes).
	Args   int      `json:"args"`
	Values []string `json:"values,omitempty"`
}

// String is the item on one line, for logs and the CLI.
func (i Item) String() string {
	s := i.Command
	if len(i.Keys) > 0 {
		s += " " + strings.Join(i.Keys, " ")
	}
	if i.MoreKeys > 0 {
		s += " (+" + strconv.Itoa(i.MoreKeys) + " keys)"
	}
	return s
}

// Log is one scanner's record of held-back writes; it lives as long as
// the scanner's unit (restarts and hot swaps keep it). Safe for
// concurrent use.
type Log struct {
	clk  clock.Clock
	keep int

	mu     sync.Mutex
	total  uint64
	ring   []Item
	next   int
	counts map[string]uint64
}

// New returns an empty log timed by clk (nil: the system clock) that
// keeps the latest keep items (<= 0: Keep; at most MaxKeep).
func New(clk clock.Clock, keep int) *Log {
	return &Log{clk: clock.Or(clk), keep: keepOf(keep), counts: map[string]uint64{}}
}

func keepOf(n int) int {
	if n <= 0 {
		return Keep
	}
	return min(n, MaxKeep)
}

// Record notes one held-back command. Keys, arguments and names are the
// plugin's text: each is kept as one bounded line.
func (l *Log) Record(d Decision) {
	it := Item{At: l.clk.Now(), Args: len(d.Args)}
	it.Command, it.Keys, it.MoreKeys, it.Values, _ = d.Bounded()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	l.counts[it.Command]++
	if len(l.ring) < l.keep {
		l.ring = append(l.ring, it)
		return
	}
	l.ring[l.next] = it
	l.next = (l.next + 1) % l.keep
}

// Snapshot is the log as status shows it.
type Snapshot struct {
	// WouldAct counts the writes held back since the unit started.
	WouldAct uint64 `json:"would_act"`
	// ByCommand counts them by command (FCALL and PGCALL by function).
	ByCommand map[string]uint64 `json:"by_command,omitempty"`
	// Latest are the latest held back, newest first.
	Latest []Item `json:"latest,omitempty"`
}

// Snapshot returns the counts and the latest n items (n <= 0: all kept).
func (l *Log) Snapshot(n int) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{WouldAct: l.total, ByCommand: make(map[string]uint64, len(l.counts))}
	for k, v := range l.counts {
		s.ByCommand[k] = v
	}
	if n <= 0 || n > len(l.ring) {
		n = len(l.ring)
	}
	// Newest first. Until the ring is full the newest is the last
	// appended; then it is the one before next (the oldest).
	newest := len(l.ring) - 1
	if len(l.ring) == l.keep {
		newest = (l.next - 1 + l.keep) % l.keep
	}
	for i := range n {
		s.Latest = append(s.Latest, l.ring[(newest-i+len(l.ring))%len(l.ring)])
	}
	return s
}

// Logs are a host's shadow logs, one per scanner name, kept for the
// host's life (a scanner switched to act and back keeps its counts).
type Logs struct {
	clk  clock.Clock
	keep int
	mu   sync.Mutex
	m    map[string]*Log
}

// NewLogs returns an empty set timed by clk whose logs keep keep items
// each (see New).
func NewLogs(clk clock.Clock, keep int) *Logs {
	return &Logs{clk: clk, keep: keep, m: map[string]*Log{}}
}

// For returns scanner name's log, made on first use.
func (ls *Logs) For(name string) *Log {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[name]
	if l == nil {
		l = New(ls.clk, ls.keep)
		ls.m[name] = l
	}
	return l
}

// Lookup returns scanner name's log if it has one.
func (ls *Logs) Lookup(name string) (*Log, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.m[name]
	return l, ok
}
