package depreconciler

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

func TestClassifyMember(t *testing.T) {
	t.Parallel()
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 7}, keys.NewUUID())
	assert.NoError(t, err)
	for _, tc := range []struct {
		m    string
		want keys.IDForm
	}{
		{id.String(), keys.IDCanonical},
		{"garbage", keys.IDInvalid},
		{"", keys.IDInvalid},
		{"{fp:7}", keys.IDInvalid},
		{"{fp:x}:" + id.UUID().String(), keys.IDInvalid},
		{"{fp:70000}:" + id.UUID().String(), keys.IDInvalid},
		{"{fp:007}:" + id.UUID().String(), keys.IDNonCanonical},
		{"{fp:7}:6F1C2D3E-4A5B-4C6D-8E7F-001122334455", keys.IDNonCanonical},
	} {
		got, kind := keys.ClassifyExecutionID(tc.m)
		assert.Equal(t, tc.want, kind, tc.m)
		if kind == keys.IDCanonical {
			assert.Equal(t, id, got)
		}
	}
}

func TestExecOfKey(t *testing.T) {
	t.Parallel()
	id, _ := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 12}, keys.NewUUID())
	k := keys.Exec(id)
	edge := keys.NewUUID()
	for _, key := range []string{k.Core(), k.DepsUnresolved(), k.Dep(edge), k.Payload()} {
		got, ok := execOfKey(key)
		assert.True(t, ok, key)
		assert.Equal(t, id, got, key)
	}
	for _, key := range []string{"", "ff:idx:{fp:12}:lane:default:eligible", "ff:exec:{fp:12}:", "ff:exec:{fp:12}:{fp:12}:short:core",
		keys.FlowIn(id.Partition(), keys.NewFlowID()).In(id)} {
		_, ok := execOfKey(key)
		assert.False(t, ok, key)
	}
}

func TestIsUpstreamRead(t *testing.T) {
	t.Parallel()
	id, _ := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 1}, keys.NewUUID())
	assert.True(t, isUpstreamRead(scannerapi.Command{"HGET", keys.Exec(id).Dep(keys.NewUUID()), "upstream_execution_id"}))
	assert.False(t, isUpstreamRead(scannerapi.Command{"HGET", keys.Exec(id).Core(), "upstream_execution_id"}))
	assert.False(t, isUpstreamRead(scannerapi.Command{"HGET", keys.Exec(id).Dep(keys.NewUUID()), "state"}))
}

func TestWithoutHeldBack(t *testing.T) {
	t.Parallel()
	errs := []scannerapi.ErrorCount{
		{Class: scannerapi.ErrRefused, Code: "", Count: 3},
		{Class: scannerapi.ErrRefused, Code: "read_dep", Count: 1},
		{Class: scannerapi.ErrServer, Code: "", Count: 2},
	}
	assert.Equal(t, []scannerapi.ErrorCount{
		{Class: scannerapi.ErrRefused, Code: "", Count: 1},
		{Class: scannerapi.ErrRefused, Code: "read_dep", Count: 1},
		{Class: scannerapi.ErrServer, Code: "", Count: 2},
	}, withoutHeldBack(errs, 2))
	assert.Equal(t, []scannerapi.ErrorCount{
		{Class: scannerapi.ErrRefused, Code: "read_dep", Count: 1},
		{Class: scannerapi.ErrServer, Code: "", Count: 2},
	}, withoutHeldBack(errs, 5))
}

func TestTracked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r     scannerapi.Reply
		class scannerapi.ErrorClass
		ok    bool
	}{
		{scannerapi.Reply{Kind: scannerapi.KindString, Str: "x"}, "", false},
		{scannerapi.Reply{Kind: scannerapi.KindError, Err: "WRONGTYPE"}, scannerapi.ErrServer, true},
		{scannertest.Failed(scannerapi.ErrTransport, "eof"), scannerapi.ErrTransport, true},
		{scannertest.Failed(scannerapi.ErrRefused, "no"), scannerapi.ErrRefused, false},
		{dryRunReply(), scannerapi.ErrRefused, false},
	} {
		class, ok := tracked(tc.r)
		assert.Equal(t, tc.ok, ok, "%+v", tc.r)
		assert.Equal(t, tc.class, class, "%+v", tc.r)
	}
}
