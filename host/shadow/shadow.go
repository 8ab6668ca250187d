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

// Keep is how many of the latest held-back commands a log keeps.
const Keep = 100

// maxKeys bounds the keys an item keeps (the rest are counted).
const maxKeys = 8

// Item is one command held back: what the scanner would have done.
type Item struct {
	At time.Time `json:"at"`
	// Command is the command, or FCALL/PGCALL and the function.
	Command string `json:"command"`
	// Keys are the keys it names (at most 8; MoreKeys counts the rest).
	Keys     []string `json:"keys,omitempty"`
	MoreKeys int      `json:"more_keys,omitempty"`
	// Args is how many arguments followed the keys.
	Args int `json:"args"`
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
	clk clock.Clock

	mu     sync.Mutex
	total  uint64
	ring   []Item
	next   int
	counts map[string]uint64
}

// New returns an empty log timed by clk (nil: the system clock).
func New(clk clock.Clock) *Log {
	return &Log{clk: clock.Or(clk), counts: map[string]uint64{}}
}

// Record notes one held-back command. Keys and names are the plugin's
// text: each is kept as one bounded line.
func (l *Log) Record(command string, keys []string, args int) {
	it := Item{At: l.clk.Now(), Command: plaintext.Line(command, 128), Args: args}
	for i, k := range keys {
		if i == maxKeys {
			it.MoreKeys = len(keys) - maxKeys
			break
		}
		it.Keys = append(it.Keys, plaintext.Line(k, 256))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	l.counts[it.Command]++
	if len(l.ring) < Keep {
		l.ring = append(l.ring, it)
		return
	}
	l.ring[l.next] = it
	l.next = (l.next + 1) % Keep
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
	if len(l.ring) == Keep {
		newest = (l.next - 1 + Keep) % Keep
	}
	for i := range n {
		s.Latest = append(s.Latest, l.ring[(newest-i+len(l.ring))%len(l.ring)])
	}
	return s
}

// Logs are a host's shadow logs, one per scanner name, kept for the
// host's life (a scanner switched to act and back keeps its counts).
type Logs struct {
	clk clock.Clock
	mu  sync.Mutex
	m   map[string]*Log
}

// NewLogs returns an empty set timed by clk.
func NewLogs(clk clock.Clock) *Logs { return &Logs{clk: clk, m: map[string]*Log{}} }

// For returns scanner name's log, made on first use.
func (ls *Logs) For(name string) *Log {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[name]
	if l == nil {
		l = New(ls.clk)
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
