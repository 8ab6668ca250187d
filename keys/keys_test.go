package keys

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustUUID(t *testing.T, s string) UUID {
	t.Helper()
	u, err := ParseUUID(s)
	require.NoError(t, err)
	return u
}

// Known answers from schema.md 1.3 and the compat README section 7.
func TestCRC16KnownAnswers(t *testing.T) {
	t.Parallel()
	assert.Equal(t, uint16(0x31C3), CRC16([]byte("123456789")))
	assert.Equal(t, uint16(0xD656), CRC16([]byte("default")))
	assert.Equal(t, uint16(0x2EC1), CRC16([]byte("workers-a")))
	flow := mustUUID(t, "550e8400-e29b-41d4-a716-446655440000")
	assert.Equal(t, uint16(0x9018), CRC16(flow[:]))
	// Hashing the text form is the wrong rule; make sure it differs.
	assert.Equal(t, uint16(0xa206), CRC16([]byte(flow.String())))
}

func TestPartitionKnownAnswers(t *testing.T) {
	t.Parallel()
	c := DefaultPartitionConfig()
	fid, err := ParseFlowID("550e8400-e29b-41d4-a716-446655440000")
	require.NoError(t, err)
	assert.Equal(t, "{fp:24}", c.FlowPartition(fid).Tag())
	assert.Equal(t, "{fp:86}", c.SoloPartition("default").Tag())
	assert.Equal(t, uint16(193), c.SoloPartition("workers-a").Index)
	assert.Equal(t, "{fp:15}", c.SoloPartition("gpu-lane").Tag())
	bid := BudgetIDFrom(fid.UUID())
	assert.Equal(t, "{b:24}", c.BudgetPartition(bid).Tag())

	for s, want := range map[string]string{
		"f0000000-0000-4000-8000-000000000001": "{fp:253}",
		"f0000000-0000-4000-8000-000000000111": "{fp:253}",
		"f0000000-0000-4000-8000-000000000002": "{fp:158}",
		"f0000000-0000-4000-8000-000000000004": "{fp:88}",
	} {
		f, err := ParseFlowID(s)
		require.NoError(t, err)
		assert.Equal(t, want, c.FlowPartition(f).Tag(), s)
	}
	for s, want := range map[string]string{
		"b0000000-0000-4000-8000-000000000001": "{b:21}",
		"b0000000-0000-4000-8000-000000000003": "{b:23}",
	} {
		b, err := ParseBudgetID(s)
		require.NoError(t, err)
		assert.Equal(t, want, c.BudgetPartition(b).Tag(), s)
	}
}

func TestClusterSlot(t *testing.T) {
	t.Parallel()
	assert.Equal(t, uint16(360), ClusterSlot("ff:flow:{fp:24}:x:core"))
	assert.Equal(t, uint16(14926), ClusterSlot("{fp:0}"))
	assert.Equal(t, uint16(9214), ClusterSlot("ff:budget:{b:24}:x"))
	// Double-tagged exec keys slot on the first tag only.
	assert.Equal(t, ClusterSlot("{fp:24}"), ClusterSlot("ff:exec:{fp:24}:{fp:24}:u:core"))
}

func TestExecutionIDMintAndParse(t *testing.T) {
	t.Parallel()
	c := DefaultPartitionConfig()
	fid, _ := ParseFlowID("550e8400-e29b-41d4-a716-446655440000")
	u := mustUUID(t, "aaaaaaaa-0000-4000-8000-000000000001")

	id := ExecutionIDForFlow(c, fid, u)
	assert.Equal(t, "{fp:24}:aaaaaaaa-0000-4000-8000-000000000001", id.String())
	solo := SoloExecutionID(c, "default", u)
	assert.Equal(t, "{fp:86}:aaaaaaaa-0000-4000-8000-000000000001", solo.String())

	back, err := ParseExecutionID(id.String())
	require.NoError(t, err)
	assert.Equal(t, id, back)

	r := NewExecutionIDForFlow(c, fid)
	assert.Equal(t, uint16(24), r.Partition().Index)
	assert.NotEqual(t, r, NewExecutionIDForFlow(c, fid), "random mints differ")
	assert.Equal(t, byte(0x40), r.UUID()[6]&0xf0, "version 4")
	assert.Equal(t, byte(0x80), r.UUID()[8]&0xc0, "RFC 4122 variant")
	assert.Equal(t, uint16(86), NewSoloExecutionID(c, "default").Partition().Index)
}

func TestExecutionIDParseErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"aaaaaaaa-0000-4000-8000-000000000001":           "must start with",
		"{fp:24}aaaaaaaa-0000-4000-8000-000000000001":    "missing \"}:\"",
		"{fp:}:aaaaaaaa-0000-4000-8000-000000000001":     "is empty",
		"{fp:007}:aaaaaaaa-0000-4000-8000-000000000001":  "leading zero",
		"{fp:+7}:aaaaaaaa-0000-4000-8000-000000000001":   "not a decimal",
		"{fp:70000}:aaaaaaaa-0000-4000-8000-00000000001": "out of range",
		"{fp:7}:AAAAAAAA-0000-4000-8000-000000000001":    "lowercase",
		"{fp:7}:aaaaaaaa000040008000000000000001":        "length 32",
		"{fp:7}:aaaaaaaa-0000-4000-8000-00000000000g":    "not hexadecimal",
		"{fp:7}:aaaaaaaa_0000-4000-8000-000000000001":    "expected '-'",
		"{b:7}:aaaaaaaa-0000-4000-8000-000000000001":     "must start with",
	}
	for in, want := range cases {
		_, err := ParseExecutionID(in)
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), want, in)
		}
	}
}

func TestBareIDsNormalise(t *testing.T) {
	t.Parallel()
	f, err := ParseFlowID("550E8400-E29B-41D4-A716-446655440000")
	require.NoError(t, err)
	assert.Equal(t, "550e8400-e29b-41d4-a716-446655440000", f.String())
	f2, err := ParseFlowID("550e8400e29b41d4a716446655440000")
	require.NoError(t, err)
	assert.Equal(t, f, f2)
	_, err = ParseBudgetID("nope")
	assert.ErrorContains(t, err, "budget id")
}

func TestParseTag(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"{fp:0}", "{fp:255}", "{b:31}", "{q:7}"} {
		p, err := ParseTag(s)
		require.NoError(t, err, s)
		assert.Equal(t, s, p.Tag())
	}
	for s, want := range map[string]string{
		"fp:1": "braces", "{fp1}": "missing ':'", "{p:1}": "unknown family", "{bp:7}": "unknown family",
		"{fp:01}": "leading zero", "{fp:x}": "not a decimal",
	} {
		_, err := ParseTag(s)
		assert.ErrorContains(t, err, want, s)
	}
}

// Key shapes as they appear in the golden vectors and schema.md section 3.
func TestKeyShapes(t *testing.T) {
	t.Parallel()
	c := DefaultPartitionConfig()
	eid, err := ParseExecutionID("{fp:86}:e0000000-0000-4000-8000-000000000001")
	require.NoError(t, err)
	k := Exec(eid)
	p := "ff:exec:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:"
	edge := mustUUID(t, "ed000000-0000-4000-8000-000000000001")
	for got, want := range map[string]string{
		k.Core(): p + "core", k.Payload(): p + "payload", k.Result(): p + "result", k.Policy(): p + "policy",
		k.Tags(): p + "tags", k.LeaseCurrent(): p + "lease:current", k.LeaseHistory(): p + "lease:history",
		k.ClaimGrant(): p + "claim_grant", k.Attempts(): p + "attempts",
		k.SuspensionCurrent(): p + "suspension:current", k.SuspensionSatisfiedSet(): p + "suspension:current:satisfied_set",
		k.SuspensionSatisfiedSignals(): p + "suspension:current:satisfied_set:signals",
		k.SuspensionMemberMap():        p + "suspension:current:member_map",
		k.Waitpoints():                 p + "waitpoints", k.Signals(): p + "signals", k.DepsMeta(): p + "deps:meta",
		k.Dep(edge):        p + "dep:ed000000-0000-4000-8000-000000000001",
		k.DepsUnresolved(): p + "deps:unresolved", k.DepsAllEdges(): p + "deps:all_edges",
		k.Attempt(0):         "ff:attempt:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:0",
		k.AttemptUsage(1):    "ff:attempt:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:1:usage",
		k.AttemptPolicy(0):   "ff:attempt:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:0:policy",
		k.AttemptSummary(2):  "ff:attempt:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:2:summary",
		k.Stream(0):          "ff:stream:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:0",
		k.StreamMeta(0):      "ff:stream:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:0:meta",
		k.SuspendDedup("k1"): "ff:dedup:suspend:{fp:86}:{fp:86}:e0000000-0000-4000-8000-000000000001:k1",
	} {
		assert.Equal(t, want, got)
	}

	fp := FlowPart(eid.Partition())
	wp := mustUUID(t, "33333333-0000-4000-8000-000000000001")
	for got, want := range map[string]string{
		fp.LaneEligible("default"):            "ff:idx:{fp:86}:lane:default:eligible",
		fp.LaneDelayed("default"):             "ff:idx:{fp:86}:lane:default:delayed",
		fp.LaneActive("default"):              "ff:idx:{fp:86}:lane:default:active",
		fp.LaneTerminal("default"):            "ff:idx:{fp:86}:lane:default:terminal",
		fp.LaneSuspended("default"):           "ff:idx:{fp:86}:lane:default:suspended",
		fp.LaneBlockedDependencies("default"): "ff:idx:{fp:86}:lane:default:blocked:dependencies",
		fp.LaneBlockedBudget("default"):       "ff:idx:{fp:86}:lane:default:blocked:budget",
		fp.LaneBlockedQuota("default"):        "ff:idx:{fp:86}:lane:default:blocked:quota",
		fp.LaneBlockedRoute("default"):        "ff:idx:{fp:86}:lane:default:blocked:route",
		fp.LaneBlockedOperator("default"):     "ff:idx:{fp:86}:lane:default:blocked:operator",
		fp.LeaseExpiry():                      "ff:idx:{fp:86}:lease_expiry",
		fp.AttemptTimeout():                   "ff:idx:{fp:86}:attempt_timeout",
		fp.ExecutionDeadline():                "ff:idx:{fp:86}:execution_deadline",
		fp.SuspensionTimeout():                "ff:idx:{fp:86}:suspension_timeout",
		fp.PendingWaitpointExpiry():           "ff:idx:{fp:86}:pending_waitpoint_expiry",
		fp.AllExecutions():                    "ff:idx:{fp:86}:all_executions",
		fp.WorkerLeases("worker-1-i1"):        "ff:idx:{fp:86}:worker:worker-1-i1:leases",
		fp.WorkerLeases(""):                   "ff:idx:{fp:86}:worker::leases",
		fp.FlowIndex():                        "ff:idx:{fp:86}:flow_index",
		fp.CancelBacklog():                    "ff:idx:{fp:86}:cancel_backlog",
		fp.PendingCancelGroups():              "ff:idx:{fp:86}:pending_cancel_groups",
		fp.WaitpointHMAC():                    "ff:sec:{fp:86}:waitpoint_hmac",
		fp.SignalDelivery():                   "ff:part:{fp:86}:signal_delivery",
		fp.LeaseHistory():                     "ff:part:{fp:86}:lease_history",
		fp.Noop():                             "ff:noop:{fp:86}",
		fp.Idem("ns1", "k1"):                  "ff:idem:{fp:86}:ns1:k1",
		fp.Waitpoint(wp):                      "ff:wp:{fp:86}:33333333-0000-4000-8000-000000000001",
		fp.WaitpointSignals(wp):               "ff:wp:{fp:86}:33333333-0000-4000-8000-000000000001:signals",
		fp.WaitpointCondition(wp):             "ff:wp:{fp:86}:33333333-0000-4000-8000-000000000001:condition",
		fp.Signal(wp):                         "ff:signal:{fp:86}:33333333-0000-4000-8000-000000000001",
		fp.SignalPayload(wp):                  "ff:signal:{fp:86}:33333333-0000-4000-8000-000000000001:payload",
		fp.SignalDedup(wp, "i"):               "ff:sigdedup:{fp:86}:33333333-0000-4000-8000-000000000001:i",
	} {
		assert.Equal(t, want, got)
	}

	fid, _ := ParseFlowID("f0000000-0000-4000-8000-000000000001")
	member := ExecutionIDForFlow(c, fid, mustUUID(t, "e0000000-0000-4000-8000-000000000002"))
	fk := Flow(c, fid)
	fb := "ff:flow:{fp:253}:f0000000-0000-4000-8000-000000000001:"
	for got, want := range map[string]string{
		fk.Core(): fb + "core", fk.Members(): fb + "members", fk.Tags(): fb + "tags", fk.Summary(): fb + "summary",
		fk.PendingCancels():  fb + "pending_cancels",
		fk.Edge(edge):        fb + "edge:ed000000-0000-4000-8000-000000000001",
		fk.Grant(edge):       fb + "grant:ed000000-0000-4000-8000-000000000001",
		fk.Out(member):       fb + "out:{fp:253}:e0000000-0000-4000-8000-000000000002",
		fk.In(member):        fb + "in:{fp:253}:e0000000-0000-4000-8000-000000000002",
		fk.EdgeGroup(member): fb + "edgegroup:{fp:253}:e0000000-0000-4000-8000-000000000002",
	} {
		assert.Equal(t, want, got)
	}

	bid, _ := ParseBudgetID("b0000000-0000-4000-8000-000000000001")
	bk := Budget(c, bid)
	bb := "ff:budget:{b:21}:b0000000-0000-4000-8000-000000000001"
	for got, want := range map[string]string{
		bk.Definition(): bb, bk.Limits(): bb + ":limits", bk.Usage(): bb + ":usage",
		bk.ByExec(member):               bb + ":by_exec:{fp:253}:e0000000-0000-4000-8000-000000000002",
		bk.ByExecIndex():                bb + ":by_exec:index",
		bk.Partition().BudgetResets():   "ff:idx:{b:21}:budget_resets",
		bk.Partition().BudgetPolicies(): "ff:idx:{b:21}:budget_policies",
		bk.Partition().UsageDedup("d1"): "ff:usagededup:{b:21}:d1",
	} {
		assert.Equal(t, want, got)
	}

	qid := QuotaIDFrom(bid.UUID())
	qk := Quota(c, qid)
	qb := "ff:quota:{q:21}:b0000000-0000-4000-8000-000000000001"
	for got, want := range map[string]string{
		qk.Definition(): qb, qk.Window("requests_per_window"): qb + ":window:requests_per_window",
		qk.Concurrency(): qb + ":concurrency", qk.AdmittedSet(): qb + ":admitted_set",
		qk.Admitted(member):            qb + ":admitted:{fp:253}:e0000000-0000-4000-8000-000000000002",
		qk.Partition().QuotaPolicies(): "ff:idx:{q:21}:quota_policies",
	} {
		assert.Equal(t, want, got)
	}

	assert.Equal(t, "ff:worker:ns:w1:alive", WorkerAlive("ns", "w1"))
	assert.Equal(t, "ff:worker:ns:w1:caps", WorkerCaps("ns", "w1"))
	assert.Equal(t, "ff:idx:ns:workers", WorkersIndex("ns"))
	// A budget partition given to FlowPart still yields an fp tag.
	assert.Equal(t, "{fp:3}", FlowPart(Partition{Family: FamilyBudget, Index: 3}).Tag())
}

func TestValidateLane(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidateLane("default"))
	require.NoError(t, ValidateLane("with space"))
	assert.ErrorContains(t, ValidateLane(""), "empty")
	assert.ErrorContains(t, ValidateLane(strings.Repeat("a", 65)), "at most 64")
	assert.ErrorContains(t, ValidateLane("tab\there"), "0x09")
	assert.ErrorContains(t, ValidateLane("é"), "printable")
}

func TestPartitionConfig(t *testing.T) {
	t.Parallel()
	c := DefaultPartitionConfig()
	require.NoError(t, c.Validate())
	assert.Equal(t, []string{"num_flow_partitions", "256", "num_budget_partitions", "32", "num_quota_partitions", "32"}, c.HashFields())
	assert.Len(t, c.Partitions(FamilyBudget), 32)
	assert.Equal(t, "{b:31}", c.Partitions(FamilyBudget)[31].Tag())
	assert.ErrorContains(t, PartitionConfig{Flow: 0, Budget: 1, Quota: 1}.Validate(), "num_flow_partitions")

	stored, err := ParsePartitionHash(map[string]string{"num_flow_partitions": "256", "num_budget_partitions": "32", "num_quota_partitions": "32"})
	require.NoError(t, err)
	require.NoError(t, c.CheckAgainst(stored))

	other := c
	other.Flow = 128
	err = other.CheckAgainst(stored)
	var mm *PartitionMismatchError
	require.ErrorAs(t, err, &mm)
	assert.Contains(t, err.Error(), "num_flow_partitions: configured 128, stored 256")

	_, err = ParsePartitionHash(map[string]string{"num_flow_partitions": "256", "num_budget_partitions": "32"})
	assert.ErrorContains(t, err, "num_quota_partitions is missing")
	_, err = ParsePartitionHash(map[string]string{"num_flow_partitions": "0", "num_budget_partitions": "32", "num_quota_partitions": "32"})
	assert.ErrorContains(t, err, `num_flow_partitions = "0"`)
}

func TestFamilies(t *testing.T) {
	t.Parallel()
	for _, f := range []Family{FamilyFlow, FamilyBudget, FamilyQuota} {
		g, err := ParseFamily(f.String())
		require.NoError(t, err)
		assert.Equal(t, f, g)
	}
	g, err := ParseFamily("execution")
	require.NoError(t, err)
	assert.Equal(t, FamilyFlow, g)
	_, err = ParseFamily("fp")
	assert.Error(t, err)
}
