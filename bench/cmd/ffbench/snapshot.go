package main

import (
	"time"

	"github.com/ffscan/ffscan/bench/measure"
)

// serverCounters reads the server's command counts (INFO commandstats)
// and its CPU time. Plain INFO on a throwaway connection: the bench's own
// client is closed during a measured window, so its keep-alive PINGs do
// not count.
func (b *bench) serverCounters() (cmds map[string]int64, cpu time.Duration, err error) {
	info, err := measure.RawInfo(b.srv.Addr, "commandstats")
	if err != nil {
		return nil, 0, err
	}
	cmds = measure.ParseCommandStats(info)
	if info, err = measure.RawInfo(b.srv.Addr, "cpu"); err != nil {
		return nil, 0, err
	}
	return cmds, measure.ParseServerCPU(info), nil
}

// cpuOf sums the CPU time the processes pids used so far.
func cpuOf(pids map[int]bool) (time.Duration, error) {
	var sum time.Duration
	for pid := range pids {
		c, err := measure.ProcCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// commandsBut sums the command counts but those of the commands named.
func commandsBut(cmds map[string]int64, but string) int64 {
	var n int64
	for k, v := range cmds {
		if k != but {
			n += v
		}
	}
	return n
}
