package host

import (
	"time"

	"github.com/ffscan/ffscan/host/census"
)

// laneLoad sums the running scanners' lane-scoped reads per second and
// returns the shortest interval among them.
func (h *Host) laneLoad() census.Load {
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
	return census.Load{KeysPerSecond: total, Interval: minIv}
}
