package scanutil_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// The kit's reply builders, by the short names the tables use.
var (
	rstr  = scannertest.Str
	rnum  = scannertest.Int
	rnull = scannertest.Nil
	rarr  = scannertest.Array
	rfail = scannertest.Failed
)

const cancelEID = "{fp:5}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f"

func TestParseCancelCore(t *testing.T) {
	c := scanutil.ParseCancelCore(rarr(rstr(cancelEID), rstr("lane-a"), rstr("2"), rstr(""), rstr("wi-1"), rstr("active")))
	assert.Equal(t, scanutil.CancelCore{Exists: true, Lane: "lane-a", Attempt: "2", Worker: "wi-1", Phase: "active"}, c)

	c = scanutil.ParseCancelCore(rarr(rnull(), rnull(), rnull(), rnull(), rnull(), rnull()))
	assert.False(t, c.Exists, "every field nil: the core is gone")
	assert.False(t, c.BadReply)

	assert.True(t, scanutil.ParseCancelCore(rarr(rstr("x"))).BadReply, "wrong length")
	assert.True(t, scanutil.ParseCancelCore(rstr("x")).BadReply, "not an array")
}

func TestCancelKeysUseTheExecutionsRealState(t *testing.T) {
	id, err := keys.ParseExecutionID(cancelEID)
	require.NoError(t, err)
	wp := keys.NewUUID()
	ks, err := scanutil.CancelKeys(id, scanutil.CancelCore{Exists: true, Lane: "lane-a", Attempt: "3", Waitpoint: wp.String(), Worker: "wi-9", Phase: "suspended"})
	require.NoError(t, err)
	require.Len(t, ks, 21)
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	assert.Equal(t, ek.Core(), ks[0])
	assert.Equal(t, ek.Attempt(3), ks[1])
	assert.Equal(t, ek.StreamMeta(3), ks[2])
	assert.Equal(t, pk.WorkerLeases("wi-9"), ks[6])
	assert.Equal(t, pk.Waitpoint(wp), ks[8])
	assert.Equal(t, pk.WaitpointCondition(wp), ks[9])
	assert.Equal(t, pk.LaneTerminal("lane-a"), ks[11])
	assert.Equal(t, pk.LaneEligible("lane-a"), ks[14])
	assert.Equal(t, pk.LaneBlockedOperator("lane-a"), ks[20])
	for _, k := range ks {
		assert.Equal(t, keys.ClusterSlot(ks[0]), keys.ClusterSlot(k), "one slot: %s", k)
	}

	// Never claimed, no waitpoint, no Worker: the placeholders of the
	// vectors (attempt 0, nil-UUID waitpoint, empty worker instance).
	ks, err = scanutil.CancelKeys(id, scanutil.CancelCore{Exists: true, Lane: "default", Phase: "runnable"})
	require.NoError(t, err)
	assert.Equal(t, ek.Attempt(0), ks[1])
	assert.Equal(t, "ff:wp:{fp:5}:00000000-0000-0000-0000-000000000000", ks[8])
	assert.Equal(t, "ff:idx:{fp:5}:worker::leases", ks[6])
}

func TestCancelKeysRefuseToGuess(t *testing.T) {
	id, err := keys.ParseExecutionID(cancelEID)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		core scanutil.CancelCore
		want error
	}{
		"no lane":           {scanutil.CancelCore{Exists: true, Phase: "runnable"}, scanutil.ErrCancelNoLane},
		"bad lane":          {scanutil.CancelCore{Exists: true, Lane: "a\nb"}, scanutil.ErrCancelBadLane},
		"bad attempt":       {scanutil.CancelCore{Exists: true, Lane: "l", Attempt: "x"}, scanutil.ErrCancelBadAttempt},
		"bad waitpoint":     {scanutil.CancelCore{Exists: true, Lane: "l", Waitpoint: "wp-1"}, scanutil.ErrCancelBadWaitpoint},
		"upper-case wp":     {scanutil.CancelCore{Exists: true, Lane: "l", Waitpoint: "0B0C6A4E-5B1D-4C3E-9F00-3D2B1A0C9E8F"}, scanutil.ErrCancelBadWaitpoint},
		"malformed reply":   {scanutil.CancelCore{BadReply: true}, scanutil.ErrCancelBadCoreFields},
		"negative attempts": {scanutil.CancelCore{Exists: true, Lane: "l", Attempt: "-1"}, scanutil.ErrCancelBadAttempt},
	} {
		_, err := scanutil.CancelKeys(id, c.core)
		assert.ErrorIs(t, err, c.want, name)
	}
}

func TestClassifyCancel(t *testing.T) {
	cases := []struct {
		name  string
		reply scannerapi.Reply
		want  scanutil.CancelResult
	}{
		{"cancelled", rarr(rnum(1), rstr("OK"), rstr("cancelled"), rstr("runnable")), scanutil.CancelResult{Kind: scanutil.CancelCancelled, Code: "OK"}},
		{"already terminal", rarr(rnum(0), rstr("execution_not_active"), rstr("success"), rstr("1"), rstr("terminal"), rstr("a")),
			scanutil.CancelResult{Kind: scanutil.CancelAlreadyTerminal, Code: "execution_not_active"}},
		{"gone", rarr(rnum(0), rstr("execution_not_found")), scanutil.CancelResult{Kind: scanutil.CancelNotFound, Code: "execution_not_found"}},
		{"other lua code", rarr(rnum(0), rstr("lease_revoked")), scanutil.CancelResult{Kind: scanutil.CancelLuaError, Class: scannerapi.ErrLua, Code: "lease_revoked"}},
		{"wrongtype", rfail(scannerapi.ErrServer, "WRONGTYPE Operation against a key"), scanutil.CancelResult{Kind: scanutil.CancelFailed, Class: scannerapi.ErrServer, Code: "WRONGTYPE"}},
		{"transport", rfail(scannerapi.ErrTransport, "i/o timeout"), scanutil.CancelResult{Kind: scanutil.CancelFailed, Class: scannerapi.ErrTransport, Code: "error"}},
		{"refused", rfail(scannerapi.ErrRefused, "refused: undeclared_function"), scanutil.CancelResult{Kind: scanutil.CancelFailed, Class: scannerapi.ErrRefused, Code: "error"}},
		{"malformed", rstr("OK"), scanutil.CancelResult{Kind: scanutil.CancelFailed, Class: scannerapi.ErrServer, Code: "malformed_reply"}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, scanutil.ClassifyCancel(c.reply), c.name)
	}
	assert.True(t, scanutil.CancelCancelled.Done())
	assert.True(t, scanutil.CancelAlreadyTerminal.Done())
	assert.True(t, scanutil.CancelNotFound.Done())
	assert.False(t, scanutil.CancelLuaError.Done())
	assert.False(t, scanutil.CancelFailed.Done())
}

func TestPredictCancel(t *testing.T) {
	assert.Equal(t, scanutil.CancelNotFound, scanutil.PredictCancel(scanutil.CancelCore{}).Kind)
	assert.Equal(t, scanutil.CancelAlreadyTerminal, scanutil.PredictCancel(scanutil.CancelCore{Exists: true, Phase: "terminal"}).Kind)
	assert.Equal(t, scanutil.CancelCancelled, scanutil.PredictCancel(scanutil.CancelCore{Exists: true, Phase: "active"}).Kind)
}
