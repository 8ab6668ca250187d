// Package flowtest keeps the root module's short import for the SDK's
// sdk/flowtest (claim, complete or fail one named execution through the
// flowfabric library in tests).
package flowtest

import "github.com/ffscan/ffscan/sdk/flowtest"

// Lease is a claimed execution.
type Lease = flowtest.Lease

// The helpers, as in sdk/flowtest.
var (
	Claim    = flowtest.Claim
	Complete = flowtest.Complete
	Fail     = flowtest.Fail
	Succeed  = flowtest.Succeed
	Flunk    = flowtest.Flunk
	Core     = flowtest.Core
)
