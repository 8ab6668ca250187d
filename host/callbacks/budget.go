package callbacks

import (
	"sync"
	"sync/atomic"
	"time"
)

// Budget bounds what one scanner's callbacks may cost the host and
// Valkey, whatever its plugin does. Over budget, a batch (or what is left
// of it) is refused, with a reason the metrics count; nothing waits and
// nothing grows without bound. Zero fields mean no bound.
type Budget struct {
	// MaxInFlight bounds the scanner's batches running at once (all its
	// plugin instances together). A plugin scans at most
	// scheduler.concurrency partitions at once, each with a batch or two
	// in flight.
	MaxInFlight int
	// CommandsPerSecond is the sustained command rate; Burst the most
	// commands taken at once after a quiet time (default: one second's
	// worth).
	CommandsPerSecond float64
	Burst             float64
	// MaxReplyBytes bounds the replies the scanner's batches in flight
	// hold together (one batch alone included), refusals included
	// (pluginhost.ReplySize's measure): a read whose reply would not fit
	// what is left is refused without being read (reads.go), and once
	// the replies reach it a batch's later commands are not sent. Shared
	// by the batches in flight, it bounds the scanner, not one batch: a
	// plugin cannot multiply it with MaxInFlight batches. Past it the
	// host holds at most one range read of a large collection per batch
	// (which only reading measures) and the replies of library
	// functions, which are read whole.
	MaxReplyBytes int64
}

// DefaultBudget is generous for ffscan's own scanners (measured drains stay
// below a tenth of the rate) and stops a runaway plugin.
var DefaultBudget = Budget{MaxInFlight: 64, CommandsPerSecond: 200_000, MaxReplyBytes: 64 << 20}

// Refusal reasons of the budget.
const (
	ReasonBudgetInFlight = "budget_in_flight"
	ReasonBudgetRate     = "budget_rate"
	ReasonBudgetReply    = "budget_reply_bytes"
)

// spend is one scanner's use of its budget.
type spend struct {
	mu       sync.Mutex
	inFlight int
	tokens   float64
	at       time.Time
	// replies is what the scanner's batches in flight hold of
	// MaxReplyBytes (account).
	replies atomic.Int64
}

// admit takes n commands and an in-flight slot; it returns the refusal
// reason, or "" and a release function.
func (s *spend) admit(b Budget, n int, now time.Time) (string, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.MaxInFlight > 0 && s.inFlight >= b.MaxInFlight {
		return ReasonBudgetInFlight, nil
	}
	if b.CommandsPerSecond > 0 {
		burst := b.Burst
		if burst <= 0 {
			burst = b.CommandsPerSecond
		}
		if s.at.IsZero() {
			s.tokens = burst
		} else {
			s.tokens = min(burst, s.tokens+now.Sub(s.at).Seconds()*b.CommandsPerSecond)
		}
		s.at = now
		if float64(n) > s.tokens {
			return ReasonBudgetRate, nil
		}
		s.tokens -= float64(n)
	}
	s.inFlight++
	return "", func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}
}
