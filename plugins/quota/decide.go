package quota

import (
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// This file holds the pure decisions: what a quota's definition, counter
// and admitted executions' phases say, and which commands set its
// bookkeeping right. It does no I/O; the scan is in scan.go.

// definitionFields are read from a quota's definition, for definitionOf.
var definitionFields = []string{"quota_policy_id", "requests_per_window_seconds", "active_concurrency_cap"}

// definitionOf reads the HMGET of definitionFields: the window (seconds,
// 0 when the quota has none) and the concurrency cap (0: none); gone when
// the definition does not exist (the id meters nothing).
func definitionOf(r scannerapi.Reply) (windowSec float64, capacity int64, gone bool) {
	f := make([]string, len(definitionFields))
	for i := range f {
		if i < len(r.Array) {
			f[i], _ = r.Array[i].Text()
		}
	}
	if f[0] == "" && f[1] == "" && f[2] == "" {
		return 0, 0, true
	}
	windowSec, _ = strconv.ParseFloat(f[1], 64)
	capf, _ := strconv.ParseFloat(f[2], 64)
	return windowSec, int64(capf), false
}

// trimUpTo is the newest score the window trim removes: the library's
// own admission check trims (-inf, now - window].
func trimUpTo(nowMs int64, windowSec float64) int64 {
	return nowMs - int64(windowSec*1000)
}

// counterOf reads the GET of a quota's concurrency counter (0 when unset
// or unreadable).
func counterOf(r scannerapi.Reply) int64 {
	s, _ := r.Text()
	n, _ := strconv.ParseFloat(s, 64)
	return int64(n)
}

// phaseRead is the read of an admitted member's phase, or nil for a
// member that is not an execution id (it holds no slot: it is dropped).
func phaseRead(member string) scannerapi.Command {
	id, err := keys.ParseExecutionID(member)
	if err != nil {
		return nil
	}
	return scannerapi.Command{"HGET", keys.Exec(id).Core(), "lifecycle_phase"}
}

// running says whether an admitted execution of this lifecycle_phase
// still holds its slot: its core exists and it is not terminal.
func running(phase string) bool {
	return phase != "" && phase != "terminal"
}

// fixCommands set a quota's bookkeeping right: the ended admissions leave
// the admitted set, and the counter becomes the number still running
// (when it is not that already).
func fixCommands(qk keys.QuotaKeys, ended []string, counter, live int64) []scannerapi.Command {
	var cmds []scannerapi.Command
	for _, m := range ended {
		cmds = append(cmds, scannerapi.Command{"SREM", qk.AdmittedSet(), m})
	}
	if counter != live {
		cmds = append(cmds, scannerapi.Command{"SET", qk.Concurrency(), strconv.FormatInt(live, 10)})
	}
	return cmds
}
