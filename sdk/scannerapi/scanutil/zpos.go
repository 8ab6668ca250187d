package scanutil

import (
	"math"
	"strconv"
)

// ZPos is where the next page of a sorted set read by score starts: at
// Score (inclusive), after the first Skip members that have exactly that
// score. Members that share a score are returned in a stable order
// (lexicographic), so skipping a count of them is exact as long as none of
// them is removed between two pages; a member removed meanwhile can make a
// page skip a tie it has not seen, which the next sweep from the start
// picks up. A scanner that cannot afford that re-reads the ties instead
// (LIMIT 0 n+Skip, dropping members it has seen) and advances with
// From(p.Score).Next(scores) over the whole page. It works for either
// direction (BYSCORE or BYSCORE REV).
type ZPos struct {
	Score float64
	Skip  int
}

// From returns the position at the start of the range: score s, nothing
// skipped.
func From(s float64) ZPos { return ZPos{Score: s} }

// Next returns the position after a page that was read from p and
// returned these scores, in the order read. An empty page leaves p as it
// is.
func (p ZPos) Next(scores []float64) ZPos {
	if len(scores) == 0 {
		return p
	}
	last := scores[len(scores)-1]
	n := 0
	for i := len(scores) - 1; i >= 0 && scores[i] == last; i-- {
		n++
	}
	if last == p.Score && n == len(scores) {
		n += p.Skip // the whole page continued p's ties
	}
	return ZPos{Score: last, Skip: n}
}

// Range returns the ZRANGE arguments of a page of n members from p towards
// bound: "<p.Score> <bound> BYSCORE [REV] LIMIT <p.Skip> <n> WITHSCORES".
func (p ZPos) Range(bound float64, rev bool, n int) []string {
	args := []string{FormatScore(p.Score), FormatScore(bound), "BYSCORE"}
	if rev {
		args = append(args, "REV")
	}
	return append(args, "LIMIT", strconv.Itoa(p.Skip), strconv.Itoa(n), "WITHSCORES")
}

// FormatScore writes a score as Valkey reads it back exactly (no exponent
// rounding, "-inf"/"+inf" for the infinities).
func FormatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
