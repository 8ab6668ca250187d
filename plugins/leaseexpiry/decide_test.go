package leaseexpiry

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// The kit's reply builders, by the short names the tables use.
var (
	str = scannertest.Str
	num = scannertest.Int
	arr = scannertest.Array
)

func TestClassifyMember(t *testing.T) {
	t.Parallel()
	for m, want := range map[string]keys.IDForm{
		"{fp:5}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":     keys.IDCanonical,
		"{fp:005}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":   keys.IDNonCanonical,
		"{fp:5}:0B0C6A4E-5B1D-4C3E-9F00-3D2B1A0C9E8F":     keys.IDNonCanonical,
		"{fp:5}:0b0c6a4e5b1d4c3e9f003d2b1a0c9e8f":         keys.IDNonCanonical,
		"0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":            keys.IDInvalid,
		"{fp:99999}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f": keys.IDInvalid,
		"{fp:x}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f":     keys.IDInvalid,
		"{fp:5}:not-a-uuid":                               keys.IDInvalid,
		"{fp:5}":                                          keys.IDInvalid,
		"":                                                keys.IDInvalid,
		"garbage":                                         keys.IDInvalid,
	} {
		_, got := keys.ClassifyExecutionID(m)
		assert.Equal(t, want, got, "%q", m)
	}
	id, kind := keys.ClassifyExecutionID("{fp:5}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f")
	assert.Equal(t, keys.IDCanonical, kind)
	assert.Equal(t, uint16(5), id.Partition().Index)
}

func TestClassifyReply(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		reply scannerapi.Reply
		want  outcome
	}{
		{"marked", arr(num(1), str("OK"), str("marked_expired")), outcome{kind: outMarked, code: "marked_expired"}},
		{"already expired", arr(num(1), str("ALREADY_SATISFIED"), str("already_expired")), outcome{kind: outStuck, code: "already_expired"}},
		{"already revoked", arr(num(1), str("ALREADY_SATISFIED"), str("already_revoked")), outcome{kind: outStuck, code: "already_revoked"}},
		{"unowned", arr(num(1), str("ALREADY_SATISFIED"), str("unowned")), outcome{kind: outCleaned, code: "unowned"}},
		{"gone", arr(num(1), str("ALREADY_SATISFIED"), str("execution_not_found")), outcome{kind: outCleaned, code: "execution_not_found"}},
		{"stale", arr(num(1), str("ALREADY_SATISFIED"), str("not_active")), outcome{kind: outCleaned, code: "not_active"}},
		{"renewed", arr(num(1), str("ALREADY_SATISFIED"), str("not_yet_expired")), outcome{kind: outNotDue, code: "not_yet_expired"}},
		{"unknown success", arr(num(1), str("OK"), str("something_new")), outcome{kind: outNotDue, code: "unknown:something_new"}},
		{"lua error", arr(num(0), str("execution_not_found")), outcome{kind: outLuaError, class: scannerapi.ErrLua, code: "execution_not_found"}},
		{"wrongtype", scannertest.Failed(scannerapi.ErrServer, "WRONGTYPE Operation against a key"),
			outcome{kind: outFailed, class: scannerapi.ErrServer, code: "WRONGTYPE"}},
		{"transport", scannertest.Failed(scannerapi.ErrTransport, "i/o timeout"),
			outcome{kind: outFailed, class: scannerapi.ErrTransport, code: "error"}},
		{"refused", scannertest.Failed(scannerapi.ErrRefused, "FCALL of ff_x is not declared"),
			outcome{kind: outFailed, class: scannerapi.ErrRefused, code: "FCALL"}},
		{"malformed", str("OK"), outcome{kind: outFailed, class: scannerapi.ErrServer, code: "malformed_reply"}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, classifyReply(c.reply), c.name)
	}
}

func TestPredictMirrorsTheFunction(t *testing.T) {
	t.Parallel()
	core := func(phase, owner, exp string) scannerapi.Reply {
		f := func(s string) scannerapi.Reply {
			if s == "" {
				return scannertest.Nil()
			}
			return str(s)
		}
		return arr(f(phase), f(owner), f(exp))
	}
	const now = 1000
	for name, c := range map[string]struct {
		r    scannerapi.Reply
		want outcomeKind
	}{
		"due":            {core("active", "leased", "999"), outMarked},
		"due exactly":    {core("active", "leased", "1000"), outMarked},
		"renewed":        {core("active", "leased", "1001"), outNotDue},
		"no expiry":      {core("active", "leased", ""), outNotDue},
		"expired":        {core("active", "lease_expired_reclaimable", "1"), outStuck},
		"revoked":        {core("active", "lease_revoked", "1"), outStuck},
		"unowned active": {core("active", "unowned", "1"), outCleaned}, // the function drops the stale entry
		"terminal":       {core("terminal", "unowned", "1"), outCleaned},
		"missing core":   {core("", "", ""), outCleaned},
		"bad reply":      {str("x"), outFailed},
	} {
		assert.Equal(t, c.want, predict(c.r, now).kind, name)
	}
}

func TestConfigure(t *testing.T) {
	t.Parallel()
	s := New()
	ctx := t.Context()
	assert.NoError(t, s.Configure(ctx, map[string]string{"namespace": "a", "instance_tag": "k=v", "lookahead": "1"}))
	assert.Equal(t, scannerapi.Filter{Namespace: "a", TagKey: "k", TagValue: "v"}, s.filter)
	assert.Equal(t, 1, s.lookahead)
	assert.Error(t, s.Configure(ctx, map[string]string{"lookahead": "-1"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"lookahead": "0"}), "no look-ahead would stall behind stuck entries")
	assert.Equal(t, 1, s.lookahead, "a rejected look-ahead keeps the old one")
	assert.Error(t, s.Configure(ctx, map[string]string{"instance_tag": "novalue"}))
	assert.Error(t, s.Configure(ctx, map[string]string{"bogus": "1"}))
	assert.Equal(t, "a", s.filter.Namespace, "a rejected configuration keeps the old one")
	assert.NoError(t, scannerapi.ValidateInfo(s.Info()))
}
