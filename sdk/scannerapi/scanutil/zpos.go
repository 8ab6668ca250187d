package scanutil

import (
	"math"
	"strconv"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// ZPos is where the next page of a sorted set read by score starts: at
// Score (inclusive), after the first Skip members that have exactly that
// score. Members that share a score are returned in a stable order
// (lexicographic), so skipping a count of them is exact as long as none of
// them is removed between two pages; a member removed meanwhile can make a
// page skip a tie it has not seen, which the next sweep from the start
// picks up. A scanner that cannot afford that re-reads the ties instead:
// it reads each page from Score at offset 0 with Skip extra members and
// drops what it has seen, either by its own bookkeeping (advancing with
// From(p.Score).Next(scores)) or with Fresh, which compares members
// (ascending reads only). Next works for either direction (BYSCORE or
// BYSCORE REV).
type ZPos struct {
	Score float64
	Skip  int
	// Member is the last member read at Score, set by Fresh (the
	// re-reading mode); Next leaves it empty.
	Member string
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

// Reread returns the ZRANGE arguments of a page for Fresh: from p.Score at
// offset 0, n members plus the p.Skip already seen at that score,
// ascending towards bound.
func (p ZPos) Reread(bound float64, n int) []string {
	return From(p.Score).Range(bound, false, n+p.Skip)
}

// Fresh takes a page read with Reread and returns the members after p (in
// Valkey's order: by score, then by member bytes) and the position after
// the page. Comparing members, not counting them, keeps a page exact when
// members at p's score were removed since p was taken. Fresh needs p to
// come from an earlier Fresh (or From, which is before every member of its
// score).
func (p ZPos) Fresh(page []scannerapi.ScoredMember) ([]scannerapi.ScoredMember, ZPos) {
	var out []scannerapi.ScoredMember
	for _, e := range page {
		if p.before(e.Score, e.Member) {
			out = append(out, e)
		}
	}
	if len(page) == 0 {
		return out, p
	}
	last := page[len(page)-1]
	if !p.before(last.Score, last.Member) {
		return out, p // the page ended at or before p
	}
	next := ZPos{Score: last.Score, Member: last.Member}
	for i := len(page) - 1; i >= 0 && page[i].Score == last.Score; i-- {
		next.Skip++
	}
	return out, next
}

// before reports whether p lies before the member m at score s. A
// position from From (no member) lies before every member of its score.
func (p ZPos) before(s float64, m string) bool {
	if s != p.Score {
		return s > p.Score
	}
	if p.Member == "" && p.Skip == 0 {
		return true
	}
	return m > p.Member
}
