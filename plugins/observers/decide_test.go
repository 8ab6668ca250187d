package observers

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

var part = keys.Partition{Family: keys.FamilyFlow, Index: 3}

func flowKeys(t *testing.T) keys.FlowKeys {
	fid, err := keys.ParseFlowID("f0000000-0000-4000-8000-000000000001")
	assert.NoError(t, err)
	return keys.FlowIn(part, fid)
}

func TestMembersRead(t *testing.T) {
	t.Parallel()
	fk := flowKeys(t)
	assert.Equal(t, scannerapi.Command{"SMEMBERS", fk.Members()}, membersRead(fk, MaxReadMembers))
	assert.Equal(t, scannerapi.Command{"SRANDMEMBER", fk.Members(), "50"}, membersRead(fk, MaxReadMembers+1))
}

func TestStateRead(t *testing.T) {
	t.Parallel()
	const eid = "{fp:3}:00000000-0000-4000-8000-000000000001"
	id, err := keys.ParseExecutionID(eid)
	assert.NoError(t, err)
	assert.Equal(t, scannerapi.Command{"HGET", keys.Exec(id).Core(), "public_state"}, stateRead(eid))
	assert.Nil(t, stateRead("garbage"))
}

func TestFlowState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		counts          map[string]int64
		sampled, purged int64
		want            string
	}{
		{"no members read", map[string]int64{}, 0, 0, "open"},
		{"all completed", map[string]int64{"completed": 2, "skipped": 1}, 3, 0, "completed"},
		{"all ended, one failed", map[string]int64{"completed": 2, "failed": 1}, 3, 0, "failed"},
		{"all ended, one cancelled", map[string]int64{"completed": 1, "cancelled": 1}, 2, 0, "failed"},
		{"all ended, one expired", map[string]int64{"expired": 1}, 1, 0, "failed"},
		{"ended and purged", map[string]int64{"completed": 1}, 2, 1, "completed"},
		{"all purged", map[string]int64{}, 2, 2, "completed"},
		{"one running", map[string]int64{"completed": 1, "active": 1}, 2, 0, "running"},
		{"running wins over blocked", map[string]int64{"active": 1, "suspended": 1}, 2, 0, "running"},
		{"suspended", map[string]int64{"suspended": 1, "completed": 1}, 2, 0, "blocked"},
		{"delayed", map[string]int64{"delayed": 1}, 1, 0, "blocked"},
		{"rate limited", map[string]int64{"rate_limited": 1}, 1, 0, "blocked"},
		{"waiting for children", map[string]int64{"waiting_children": 1}, 1, 0, "blocked"},
		{"waiting", map[string]int64{"waiting": 2}, 2, 0, "open"},
	} {
		assert.Equal(t, tc.want, flowState(tc.counts, tc.sampled, tc.purged), tc.name)
	}
}

func TestRetired(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state          string
		sampled, total int64
		want           bool
	}{
		{"completed", 3, 3, true},
		{"failed", 3, 3, true},
		{"completed", 50, 1001, false}, // a sample cannot say all ended
		{"running", 3, 3, false},
		{"blocked", 3, 3, false},
		{"open", 0, 0, false},
	} {
		assert.Equal(t, tc.want, retired(tc.state, tc.sampled, tc.total), "%+v", tc)
	}
}

func TestSummaryCommand(t *testing.T) {
	t.Parallel()
	fk := flowKeys(t)
	got := summaryCommand(fk, 4, 3, map[string]int64{"completed": 2, "active": 1}, "running", 1234)
	assert.Equal(t, scannerapi.Command{"HSET", fk.Summary(), "total_members", "4", "sampled_members", "3",
		"members_completed", "2", "members_failed", "0", "members_cancelled", "0", "members_expired", "0",
		"members_skipped", "0", "members_active", "1", "members_suspended", "0", "members_waiting", "0",
		"members_delayed", "0", "members_rate_limited", "0", "members_waiting_children", "0",
		"public_flow_state", "running", "last_summary_update_at", "1234"}, got)
}

func TestExpectedIndex(t *testing.T) {
	t.Parallel()
	pk := keys.FlowPart(part)
	const lane = "l"
	for _, tc := range []struct {
		phase, eligibility, ownership string
		want                          string
	}{
		{"active", "", "leased", pk.LaneActive(lane)},
		{"active", "", "lease_expired_reclaimable", ""},
		{"active", "", "lease_revoked", ""},
		{"runnable", "eligible_now", "unowned", pk.LaneEligible(lane)},
		{"runnable", "not_eligible_until_time", "unowned", pk.LaneDelayed(lane)},
		{"runnable", "blocked_by_dependencies", "unowned", pk.LaneBlockedDependencies(lane)},
		{"runnable", "blocked_by_budget", "unowned", pk.LaneBlockedBudget(lane)},
		{"runnable", "blocked_by_quota", "unowned", pk.LaneBlockedQuota(lane)},
		{"runnable", "blocked_by_route", "unowned", pk.LaneBlockedRoute(lane)},
		{"runnable", "blocked_by_operator", "unowned", pk.LaneBlockedOperator(lane)},
		{"runnable", "something_new", "unowned", ""},
		{"suspended", "", "", pk.LaneSuspended(lane)},
		{"terminal", "", "", pk.LaneTerminal(lane)},
		{"", "", "", ""},
	} {
		assert.Equal(t, tc.want, ExpectedIndex(pk, tc.phase, tc.eligibility, tc.ownership, lane), "%+v", tc)
	}
}

func TestSameState(t *testing.T) {
	t.Parallel()
	state := []string{"runnable", "eligible_now", "unowned", "l"}
	core := func(f ...string) scannerapi.Reply {
		r := scannertest.Array()
		for _, s := range f {
			r.Array = append(r.Array, scannertest.Str(s))
		}
		return r
	}
	assert.True(t, sameState(core("e", "runnable", "eligible_now", "unowned", "l"), state))
	assert.False(t, sameState(core("e", "active", "eligible_now", "leased", "l"), state), "moved on")
	assert.False(t, sameState(core("e", "runnable"), state), "a short reply")
	assert.False(t, sameState(scannertest.Failed(scannerapi.ErrServer, "ERR x"), state))
}
