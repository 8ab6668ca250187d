package cancelreconciler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// The kit's reply builders, by the short names the tables use.
var (
	str  = scannertest.Str
	num  = scannertest.Int
	null = scannertest.Nil
	arr  = scannertest.Array
	fail = scannertest.Failed
)

const eid = "{fp:5}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f"

func TestClassifyMember(t *testing.T) {
	t.Parallel()
	for m, want := range map[string]keys.IDForm{
		eid: keys.IDCanonical,
		"{fp:005}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":   keys.IDNonCanonical,
		"{fp:5}:0B0C6A4E-5B1D-4C3E-9F00-3D2B1A0C9E8F":     keys.IDNonCanonical,
		"{fp:5}:0b0c6a4e5b1d4c3e9f003d2b1a0c9e8f":         keys.IDNonCanonical,
		"0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":            keys.IDInvalid,
		"{fp:99999}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f": keys.IDInvalid,
		"{fp:5}:not-a-uuid":                               keys.IDInvalid,
		"":                                                keys.IDInvalid,
		"garbage":                                         keys.IDInvalid,
	} {
		_, got := keys.ClassifyExecutionID(m)
		assert.Equal(t, want, got, "%q", m)
	}
}

func TestClassifyAck(t *testing.T) {
	t.Parallel()
	assert.Nil(t, classifyAck(arr(num(1), str("OK"))))
	assert.Equal(t, &outcome{Kind: outLuaError, Class: scannerapi.ErrLua, Code: "x"}, classifyAck(arr(num(0), str("x"))))
	assert.Equal(t, scannerapi.ErrTransport, classifyAck(fail(scannerapi.ErrTransport, "eof")).Class)
}

func TestFlowReason(t *testing.T) {
	t.Parallel()
	assert.Equal(t, DefaultReason, flowReason(null()), "no reason recorded")
	assert.Equal(t, "", flowReason(str("")), "an empty reason is a reason")
	assert.Equal(t, "budget", flowReason(str("budget")))
}

func TestConfigureValidates(t *testing.T) {
	t.Parallel()
	s := New()
	ctx := t.Context()
	require.NoError(t, s.Configure(ctx, map[string]string{"lookahead": "0", "members_per_flow": "10", "namespace": "a"}))
	assert.Equal(t, 0, s.cfg.lookahead)
	assert.Equal(t, 10, s.cfg.members)
	assert.Error(t, s.Configure(ctx, map[string]string{"members_per_flow": "0"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"lookahead": "-1"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"instance_tag": "=x"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"bogus": "1"}))
	assert.Equal(t, 10, s.cfg.members, "a rejected configuration keeps the old one")
	require.NoError(t, scannerapi.ValidateInfo(s.Info()))
}
