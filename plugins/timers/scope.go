package timers

import (
	"slices"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// functionScope is the FunctionScope of one of the timers' library calls
// (specs.go): the keys each call passes, built with placeholders, plus
// the index the scanner read the entry from (source, a pattern) for the
// calls that pass it.
func functionScope(fn, source string) scannerapi.FunctionScope {
	ek, pk := keys.Exec(scanutil.AnyExecution()), keys.FlowPart(keys.Partition{Family: keys.FamilyFlow})
	idx, lane, wp, worker := scanutil.AnyIndex, scanutil.AnyLane, scanutil.AnyUUID(), scanutil.AnyName
	var ks []string
	withSource := false
	switch fn {
	case "ff_fail_execution":
		ks = []string{ek.Core(), ek.Attempt(idx), pk.LeaseExpiry(), pk.WorkerLeases(worker), pk.LaneTerminal(lane),
			pk.LaneDelayed(lane), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(lane), ek.StreamMeta(idx),
			pk.AttemptTimeout(), pk.ExecutionDeadline()}
	case "ff_expire_execution":
		ks = []string{ek.Core(), ek.Attempt(idx), ek.StreamMeta(idx), ek.LeaseCurrent(), ek.LeaseHistory(),
			pk.LeaseExpiry(), pk.WorkerLeases(worker), pk.LaneActive(lane), pk.LaneTerminal(lane), pk.AttemptTimeout(),
			pk.ExecutionDeadline(), pk.LaneSuspended(lane), pk.SuspensionTimeout(), ek.SuspensionCurrent()}
	case "ff_expire_suspension":
		ks = []string{ek.Core(), ek.SuspensionCurrent(), pk.Waitpoint(wp), pk.WaitpointCondition(wp), ek.Attempt(idx),
			ek.StreamMeta(idx), pk.SuspensionTimeout(), pk.LaneSuspended(lane), pk.LaneTerminal(lane),
			pk.LaneEligible(lane), pk.LaneDelayed(lane), ek.LeaseHistory()}
	case "ff_close_waitpoint":
		ks, withSource = []string{ek.Core(), pk.Noop(), pk.Waitpoint(wp)}, true
	case "ff_promote_delayed":
		ks, withSource = []string{ek.Core(), pk.LaneEligible(lane)}, true
	default:
		panic("timers: no scope for " + fn)
	}
	pats := scanutil.ScopePatterns(nil, ks...)
	if withSource {
		pats = append(pats, source)
		slices.Sort(pats)
	}
	return scannerapi.FunctionScope{Function: fn, Patterns: pats}
}
