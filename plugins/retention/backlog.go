package retention

// This file measures the backlog between scans (SampleBacklog).

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// SampleBacklog implements scannerapi.BacklogSampler: per partition, the terminal
// entries older than now - default_retention over every lane (the lanes
// the host passed in requests and those in ff:idx:lanes). Two Execs for
// all partitions: TIME and the lanes, then the counts.
func (s *Scanner) SampleBacklog(ctx context.Context, host scannerapi.Host, partitions []keys.Partition) ([]int64, error) {
	if len(partitions) == 0 {
		return nil, nil
	}
	r, err := host.Exec(ctx, []scannerapi.Command{{"TIME"}, {"SMEMBERS", keys.LanesIndex}})
	if err != nil {
		return nil, err
	}
	if len(r) != 2 {
		return nil, fmt.Errorf("host answered %d replies to 2 commands", len(r))
	}
	now, err := serverTime(r[0])
	if err != nil {
		return nil, err
	}
	stored, ok := replyStrings(r[1])
	if !ok {
		return nil, fmt.Errorf("read %s: %v", keys.LanesIndex, r[1].AsError())
	}
	s.mu.Lock()
	def := s.cfg.ret.def
	set := map[string]bool{}
	for l := range s.lanes {
		set[l] = true
	}
	s.mu.Unlock()
	for _, l := range stored {
		set[l] = true
	}
	lanes := make([]string, 0, len(set))
	for l := range set {
		if keys.ValidateLane(l) == nil {
			lanes = append(lanes, l)
		}
	}
	sort.Strings(lanes)
	out := make([]int64, len(partitions))
	if len(lanes) == 0 {
		return out, nil
	}
	cut := strconv.FormatInt(now-def.Milliseconds(), 10)
	var cmds []scannerapi.Command
	for _, p := range partitions {
		pk := keys.FlowPart(p)
		for _, l := range lanes {
			cmds = append(cmds, scannerapi.Command{"ZCOUNT", pk.LaneTerminal(l), "-inf", cut})
		}
	}
	replies, err := scannerapi.ExecChunked(ctx, host, cmds, execChunk)
	if err != nil {
		return nil, err
	}
	for i, rep := range replies {
		if rep.Failed() || rep.Kind != scannerapi.KindInt {
			return nil, fmt.Errorf("backlog count: %v", rep.AsError())
		}
		out[i/len(lanes)] += rep.Int
	}
	return out, nil
}

func serverTime(r scannerapi.Reply) (int64, error) {
	parts, ok := replyStrings(r)
	if !ok || len(parts) != 2 {
		return 0, fmt.Errorf("unexpected TIME reply")
	}
	secs, err1 := strconv.ParseInt(parts[0], 10, 64)
	micros, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected TIME reply %q", parts)
	}
	return secs*1000 + micros/1000, nil
}
