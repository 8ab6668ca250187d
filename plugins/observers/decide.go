package observers

import (
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// This file holds the pure decisions of both observers: for
// flow_projector, what a flow's members say its state is and what its
// summary holds; for index_reconciler, which lane index an execution's
// state names. It does no I/O; the scans are in flowprojector.go and
// indexreconciler.go.

// membersRead reads a flow's members: all of them, or a sample of
// SampleMembers when it has more than MaxReadMembers.
func membersRead(fk keys.FlowKeys, total int64) scannerapi.Command {
	if total > MaxReadMembers {
		return scannerapi.Command{"SRANDMEMBER", fk.Members(), strconv.Itoa(SampleMembers)}
	}
	return scannerapi.Command{"SMEMBERS", fk.Members()}
}

// stateRead reads a member's public state, or is nil for a member that is
// not an execution id (counted invalid).
func stateRead(member string) scannerapi.Command {
	id, err := keys.ParseExecutionID(member)
	if err != nil {
		return nil
	}
	return scannerapi.Command{"HGET", keys.Exec(id).Core(), "public_state"}
}

// terminalStates are the public states of an ended execution.
var terminalStates = []string{"completed", "skipped", "failed", "cancelled", "expired"}

// flowState derives the flow's state from its member counts. A purged
// member (core gone) ended: retention purges only ended executions.
func flowState(counts map[string]int64, sampled, purged int64) string {
	var ended int64 = purged
	for _, s := range terminalStates {
		ended += counts[s]
	}
	switch {
	case sampled > 0 && ended == sampled:
		if counts["failed"]+counts["cancelled"]+counts["expired"] > 0 {
			return "failed"
		}
		return "completed"
	case counts["active"] > 0:
		return "running"
	case counts["suspended"]+counts["delayed"]+counts["rate_limited"]+counts["waiting_children"] > 0:
		return "blocked"
	}
	return "open"
}

// summaryStates are the per-state counts the summary carries.
var summaryStates = []string{"completed", "failed", "cancelled", "expired", "skipped", "active", "suspended",
	"waiting", "delayed", "rate_limited", "waiting_children"}

// retired says whether a flow leaves flow_index: it ended, and every
// member was read (a sample cannot say that all ended).
func retired(state string, sampled, total int64) bool {
	return (state == "failed" || state == "completed") && sampled == total
}

// summaryCommand writes a flow's summary: its member counts, its state and
// when it was derived.
func summaryCommand(fk keys.FlowKeys, total, sampled int64, counts map[string]int64, state string, nowMs int64) scannerapi.Command {
	hset := scannerapi.Command{"HSET", fk.Summary(), "total_members", strconv.FormatInt(total, 10),
		"sampled_members", strconv.FormatInt(sampled, 10)}
	for _, s := range summaryStates {
		hset = append(hset, "members_"+s, strconv.FormatInt(counts[s], 10))
	}
	return append(hset, "public_flow_state", state, "last_summary_update_at", strconv.FormatInt(nowMs, 10))
}

// stateFields are read from an execution's core by index_reconciler.
var stateFields = []string{"execution_id", "lifecycle_phase", "eligibility_state", "ownership_state", "lane_id"}

// ExpectedIndex names the lane index an execution in this state belongs
// to ("" when its state names none, e.g. an active execution whose lease
// expired or was revoked).
func ExpectedIndex(pk keys.FlowPartKeys, phase, eligibility, ownership, lane string) string {
	switch phase {
	case "active":
		if ownership == "leased" {
			return pk.LaneActive(lane)
		}
	case "runnable":
		switch eligibility {
		case "eligible_now":
			return pk.LaneEligible(lane)
		case "not_eligible_until_time":
			return pk.LaneDelayed(lane)
		case "blocked_by_dependencies":
			return pk.LaneBlockedDependencies(lane)
		case "blocked_by_budget":
			return pk.LaneBlockedBudget(lane)
		case "blocked_by_quota":
			return pk.LaneBlockedQuota(lane)
		case "blocked_by_route":
			return pk.LaneBlockedRoute(lane)
		case "blocked_by_operator":
			return pk.LaneBlockedOperator(lane)
		}
	case "suspended":
		return pk.LaneSuspended(lane)
	case "terminal":
		return pk.LaneTerminal(lane)
	}
	return ""
}

// sameState reports whether an HMGET of stateFields still shows state
// (stateFields without execution_id).
func sameState(r scannerapi.Reply, state []string) bool {
	if r.Failed() || len(r.Array) != len(stateFields) {
		return false
	}
	for i, want := range state {
		got, _ := r.Array[i+1].Text()
		if got != want {
			return false
		}
	}
	return true
}
