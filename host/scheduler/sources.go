package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// CheckInfo rejects an Info the host cannot drive. On top of
// scannerapi.ValidateInfo (which Launch applies too, but a linked scanner
// skips) it refuses a "due" backlog on a set source, which has no scores to
// count by, and Postgres sources and functions this host's library does not
// have. The supervisor's launcher calls it at every launch so a bad
// plugin fails loudly instead of scanning nothing.
func CheckInfo(info scannerapi.Info) error {
	if err := scannerapi.ValidateInfo(info); err != nil {
		return err
	}
	for _, s := range info.Sources {
		if s.Backlog == scannerapi.BacklogDue && s.Kind == scannerapi.SourceSetScan {
			return fmt.Errorf("scanner %s: source %s: backlog %q needs a zset source", info.Name, s.Name, s.Backlog)
		}
		if s.Kind == scannerapi.SourcePostgres && !postgres.CandidateFunctions[s.Key] {
			return fmt.Errorf("scanner %s: source %s: %q is not a candidate function of this host's Postgres library (it has: %s)",
				info.Name, s.Name, s.Key, strings.Join(slices.Sorted(maps.Keys(postgres.CandidateFunctions)), ", "))
		}
	}
	for _, f := range info.Functions {
		if fn, ok := strings.CutPrefix(f, "pg:"); ok {
			if _, known := postgres.ActionFunctions[fn]; !known {
				return fmt.Errorf("scanner %s: function %s: %q is not an action function of this host's Postgres library (it has: %s)",
					info.Name, f, fn, strings.Join(slices.Sorted(maps.Keys(postgres.ActionFunctions)), ", "))
			}
		}
	}
	return nil
}

// sourceKey is one concrete key read for one partition.
type sourceKey struct {
	src  scannerapi.CandidateSource
	key  string
	lane string
}

// expand returns the concrete keys of a partition: one per source, or one
// per lane for "{lane}" sources.
func expand(srcs []scannerapi.CandidateSource, p keys.Partition, lanes []string) []sourceKey {
	var out []sourceKey
	for _, s := range srcs {
		k := strings.ReplaceAll(s.Key, "{p}", p.Tag())
		if !strings.Contains(k, "{lane}") {
			out = append(out, sourceKey{src: s, key: k})
			continue
		}
		for _, l := range lanes {
			out = append(out, sourceKey{src: s, key: strings.ReplaceAll(k, "{lane}", l), lane: l})
		}
	}
	return out
}

func scoreArg(ms int64) string { return strconv.FormatInt(ms, 10) }

// maxScore is the inclusive "due" bound of a zset source.
func maxScore(s scannerapi.CandidateSource, nowMs int64) int64 {
	return nowMs + s.ScoreOffset.Milliseconds()
}

// readCmd builds the candidate read of one key. cursor is the rank offset
// (zset_rotate) or the SSCAN cursor (set_scan). rank reads a due-ordered
// source by rank, the batch plus one, instead of by score: the same due
// entries, and the first that is not due yet (wake.go).
func readCmd(c valkey.Client, sk sourceKey, nowMs int64, batch int, cursor uint64, rank bool) valkey.Completed {
	b := c.B()
	switch sk.src.Kind {
	case scannerapi.SourceZSetRotate:
		start := int64(cursor)
		return b.Zrange().Key(sk.key).Min(strconv.FormatInt(start, 10)).Max(strconv.FormatInt(start+int64(batch)-1, 10)).Withscores().Build()
	case scannerapi.SourceSetScan:
		return b.Sscan().Key(sk.key).Cursor(cursor).Count(int64(batch)).Build()
	default: // SourceZSetDue
		if rank {
			return b.Zrange().Key(sk.key).Min("0").Max(strconv.Itoa(batch)).Withscores().Build()
		}
		return b.Zrange().Key(sk.key).Min("-inf").Max(scoreArg(maxScore(sk.src, nowMs))).Byscore().Limit(0, int64(batch)).Withscores().Build()
	}
}

// nextDueCmd reads the first entry of a due-ordered source that is not due
// at nowMs.
func nextDueCmd(c valkey.Client, sk sourceKey, nowMs int64) valkey.Completed {
	return c.B().Zrange().Key(sk.key).Min("("+scoreArg(maxScore(sk.src, nowMs))).Max("+inf").Byscore().Limit(0, 1).Withscores().Build()
}

// backlogCmd builds the backlog read of one key, or reports none.
func backlogCmd(c valkey.Client, sk sourceKey, nowMs int64) (valkey.Completed, bool) {
	b := c.B()
	switch sk.src.Backlog {
	case scannerapi.BacklogDue:
		return b.Zcount().Key(sk.key).Min("-inf").Max(scoreArg(maxScore(sk.src, nowMs))).Build(), true
	case scannerapi.BacklogSize:
		if sk.src.Kind == scannerapi.SourceSetScan {
			return b.Scard().Key(sk.key).Build(), true
		}
		return b.Zcard().Key(sk.key).Build(), true
	}
	return valkey.Completed{}, false
}

// hasLaneSource reports whether a source is read per lane.
func hasLaneSource(info scannerapi.Info) bool {
	for _, s := range info.Sources {
		if strings.Contains(s.Key, "{lane}") {
			return true
		}
	}
	return false
}
