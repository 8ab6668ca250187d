package scanutil_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

func TestScopePatternsFromKeyBuilders(t *testing.T) {
	ek := keys.Exec(scanutil.AnyExecution())
	pk := keys.FlowPart(scanutil.AnyExecution().Partition())
	got := scanutil.ScopePatterns(nil,
		ek.Core(), ek.Attempt(scanutil.AnyIndex), pk.LaneEligible(scanutil.AnyLane),
		pk.WorkerLeases(scanutil.AnyName), pk.LeaseExpiry(), ek.Core(),
		keys.BudgetIn(keys.Partition{Family: keys.FamilyBudget, Index: 3}, keys.BudgetIDFrom(scanutil.AnyUUID())).Definition())
	assert.Equal(t, []string{
		"ff:attempt:{fp:*}:{fp:*}:*:*",
		"ff:budget:{b:*}:*",
		"ff:exec:{fp:*}:{fp:*}:*:core",
		"ff:idx:{fp:*}:lane:*:eligible",
		"ff:idx:{fp:*}:lease_expiry",
		"ff:idx:{fp:*}:worker:*:leases",
	}, got)
	// The patterns admit the keys of real calls, and nothing of another
	// shape.
	scope := scannerapi.FunctionScope{Patterns: got}
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 12}, keys.NewUUID())
	assert.NoError(t, err)
	assert.True(t, scope.Allows(keys.Exec(id).Core()))
	assert.True(t, scope.Allows(keys.Exec(id).Attempt(3)))
	assert.True(t, scope.Allows(keys.FlowPart(id.Partition()).LaneEligible("default")))
	assert.False(t, scope.Allows(keys.Exec(id).Payload()))
	assert.False(t, scope.Allows(keys.ConfigPartitions))
}

// CancelScope admits the keys of every cancel CancelKeys builds, those of
// an execution without an attempt, waitpoint or worker included.
func TestCancelScopeAdmitsCancelKeys(t *testing.T) {
	scope := scanutil.CancelScope()
	assert.Equal(t, "ff_cancel_execution", scope.Function)
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 200}, keys.NewUUID())
	assert.NoError(t, err)
	for _, core := range []scanutil.CancelCore{
		{Lane: "default"},
		{Lane: "a lane", Attempt: "7", Waitpoint: keys.NewUUID().String(), Worker: "w-1"},
	} {
		ks, err := scanutil.CancelKeys(id, core)
		assert.NoError(t, err)
		for _, k := range ks {
			assert.True(t, scope.Allows(k), "%s", k)
		}
	}
	assert.False(t, scope.Allows(keys.ConfigPartitions))
	assert.False(t, scope.Allows(keys.Exec(id).Payload()))
}
