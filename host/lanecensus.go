package host

import (
	"context"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/lanes"
)

// censusWorth is how much cheaper the census must be than reading every
// lane's key before auto mode uses it.
const censusWorth = 2

// censusGrace is how long the census outlives the lane-scoped scanners'
// load dropping to nothing (see runCensus).
const censusGrace = 30 * time.Second

// CensusMinLanes is the fewest lanes auto mode uses the census for: with
// few lanes, reading every lane's key costs a few commands per interval
// (one EXISTS covers a lane's keys of 256 partitions on a single node),
// and the census would only add latency for new lane keys.
const CensusMinLanes = 64

// commandCost weighs a command against a key lookup in the comparison
// (parsing, dispatch and the reply cost about as much as a few dozen
// lookups).
const commandCost = 20

// runCensus keeps the lane census (host/census) for as long as it is
// cheaper than reading every lane's key: in keys visited per second, a
// pass over the primaries' keyspace every half of the shortest lane-scoped
// interval against partitions x lanes x lane-scoped sources per interval,
// summed over the scanners. That holds for many lanes over a keyspace of
// moderate size (thousands of lanes, an idle or modest deployment), and
// not for one lane over millions of keys, where reading the keys directly
// is cheaper; and only with at least CensusMinLanes lanes.
// scheduler.lane_census: on uses it always, off never.
func (h *Host) runCensus(ctx context.Context) {
	var dbsize, largest int64
	var primaries int
	var sized, passStart, lastLoad time.Time
	var lastDirect float64
	var lastIv time.Duration
	on := false
	for {
		wait := time.Second
		mode := h.config().Scheduler.LaneCensus
		direct, minIv := h.laneLoad()
		// A lane-scoped scanner that is briefly unavailable (a plugin
		// restarting, a swap) reports no load: the census is kept through
		// such gaps (up to censusGrace) rather than forgotten and warmed
		// again, with every lane key read in between.
		if direct > 0 {
			lastDirect, lastIv, lastLoad = direct, minIv, time.Now()
		} else if !lastLoad.IsZero() && time.Since(lastLoad) < censusGrace {
			direct, minIv = lastDirect, lastIv
		}
		want := false
		if mode != "off" && direct > 0 && (mode == "on" || len(h.Lanes()) >= CensusMinLanes) {
			if time.Since(sized) > 2*time.Second {
				if n, m, p, err := primaryKeys(ctx, h); err == nil {
					dbsize, largest, primaries, sized = n, m, p, time.Now()
				} else if ctx.Err() == nil {
					h.log.Debug("lane census: DBSIZE failed", "error", err)
				}
			}
			period := max(minIv/2, 100*time.Millisecond)
			// Key lookups plus commands, per second: SCAN pages over
			// every key against the lane keys read directly (on a single
			// node EXISTS checks 256 partitions' keys in one command).
			cost := (float64(dbsize) + commandCost*(float64(dbsize)/lanes.PageSize+float64(primaries))) / period.Seconds()
			perCommand := 256.0
			if h.client.Mode() == valkey.ClientModeCluster {
				perCommand = 1
			}
			directCost := direct + commandCost*direct/perCommand
			want = mode == "on" || (!sized.IsZero() && cost*censusWorth < directCost)
			if want {
				// A pass per period, in at most eight steps; a pass that
				// ends early waits for the period's end.
				if passStart.IsZero() {
					passStart = time.Now()
				}
				wait = period / 8
				pages := int(largest/lanes.PageSize/8) + 1
				h.census.SetEnabled(true)
				ended, err := h.census.Step(ctx, pages)
				if err != nil && ctx.Err() == nil {
					h.log.Debug("lane census step failed; the pass starts over", "error", err)
				}
				if ended || err != nil || !h.census.InPass() {
					wait = max(time.Until(passStart.Add(period)), 10*time.Millisecond)
					passStart = time.Time{}
				}
			}
		}
		if want != on {
			on = want
			if on {
				h.log.Info("lane census on: lane-scoped sources read only the lane keys that exist",
					"lane_key_reads_per_second_without", int64(direct), "keys", dbsize)
			} else {
				h.census.SetEnabled(false)
				h.log.Info("lane census off: every lane's key is read")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// laneLoad sums the running scanners' lane-scoped reads per second and
// returns the shortest interval among them.
func (h *Host) laneLoad() (float64, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var total float64
	var minIv time.Duration
	for _, u := range h.units {
		rate, iv := u.run.LaneLoad()
		if rate == 0 {
			continue
		}
		total += rate
		if minIv == 0 || iv < minIv {
			minIv = iv
		}
	}
	return total, minIv
}

// primaryKeys returns the keys of every primary together and of the
// largest, and how many primaries there are.
func primaryKeys(ctx context.Context, h *Host) (total, largest int64, primaries int, err error) {
	for _, node := range h.client.Nodes() {
		primary, err := lanes.IsPrimary(ctx, node)
		if err != nil {
			return 0, 0, 0, err
		}
		if !primary {
			continue
		}
		n, err := node.Do(ctx, node.B().Dbsize().Build()).AsInt64()
		if err != nil {
			return 0, 0, 0, err
		}
		total += n
		largest = max(largest, n)
		primaries++
	}
	return total, largest, primaries, nil
}
