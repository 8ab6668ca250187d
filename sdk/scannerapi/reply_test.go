package scannerapi_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// The kit's reply builders, by the short names the tables use.
var (
	str = scannertest.Str
	num = scannertest.Int
	arr = scannertest.Array
)

func TestFCall(t *testing.T) {
	assert.Equal(t, scannerapi.Command{"FCALL", "ff_x", "2", "k1", "k2", "a", "b"},
		scannerapi.FCall("ff_x", []string{"k1", "k2"}, "a", "b"))
	assert.Equal(t, scannerapi.Command{"FCALL", "ff_y", "0"}, scannerapi.FCall("ff_y", nil))
}

func TestParseFunctionReply(t *testing.T) {
	r, err := scannerapi.ParseFunctionReply(arr(num(1), str("OK"), str("marked_expired")))
	require.NoError(t, err)
	assert.Equal(t, scannerapi.FunctionReply{Success: true, Status: "OK", Fields: []string{"marked_expired"}}, r)
	assert.Equal(t, "marked_expired", r.Field(0))
	assert.Equal(t, "", r.Field(5))

	r, err = scannerapi.ParseFunctionReply(arr(num(1), str("ALREADY_SATISFIED"), str("not_active")))
	require.NoError(t, err)
	assert.Equal(t, scannerapi.StatusAlreadySatisfied, r.Status)

	r, err = scannerapi.ParseFunctionReply(arr(num(0), str("execution_not_active"), str("success"), num(3),
		scannerapi.Reply{Kind: scannerapi.KindNil}))
	require.NoError(t, err)
	assert.Equal(t, scannerapi.FunctionReply{Code: "execution_not_active", Fields: []string{"success", "3", ""}}, r)

	_, err = scannerapi.ParseFunctionReply(scannerapi.Reply{Kind: scannerapi.KindError, Err: "ERR boom", ErrClass: scannerapi.ErrServer})
	var re *scannerapi.ReplyError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, scannerapi.ErrServer, re.Class)
	assert.False(t, errors.Is(err, scannerapi.ErrMalformedReply))

	for name, bad := range map[string]scannerapi.Reply{
		"scalar":      str("OK"),
		"short":       arr(num(1)),
		"flag 2":      arr(num(2), str("OK")),
		"flag text":   arr(str("yes"), str("OK")),
		"empty code":  arr(num(0), str("")),
		"int code":    arr(num(0), num(5)),
		"nested":      arr(num(1), str("OK"), arr(num(1))),
		"nil":         {Kind: scannerapi.KindNil},
		"array empty": arr(),
	} {
		_, err := scannerapi.ParseFunctionReply(bad)
		assert.ErrorIs(t, err, scannerapi.ErrMalformedReply, name)
	}
	// A flag sent as a bulk string (RESP2 clients, some proxies) is fine.
	r, err = scannerapi.ParseFunctionReply(arr(str("1"), str("OK")))
	require.NoError(t, err)
	assert.True(t, r.Success)
}

func TestReplyText(t *testing.T) {
	s, ok := num(42).Text()
	assert.True(t, ok)
	assert.Equal(t, "42", s)
	s, ok = scannerapi.Reply{Kind: scannerapi.KindFloat, Float: 1.5}.Text()
	assert.True(t, ok)
	assert.Equal(t, "1.5", s)
	_, ok = arr().Text()
	assert.False(t, ok)
	assert.True(t, scannerapi.Reply{}.IsNil())
	assert.Nil(t, str("x").AsError())
}

func TestScanResultAddError(t *testing.T) {
	var r scannerapi.ScanResult
	r.AddError(scannerapi.ErrLua, "a", 1)
	r.AddError(scannerapi.ErrTransport, "", 2)
	r.AddError(scannerapi.ErrLua, "a", 3)
	r.AddError(scannerapi.ErrLua, "b", 0)
	assert.Equal(t, []scannerapi.ErrorCount{{Class: scannerapi.ErrLua, Code: "a", Count: 4}, {Class: scannerapi.ErrTransport, Count: 2}}, r.Errors)
	assert.Equal(t, int64(6), r.ErrorTotal())
}

func TestParseScoredMembers(t *testing.T) {
	want := []scannerapi.ScoredMember{{Member: "a", Score: 1}, {Member: "b", Score: 2.5}}
	got, err := scannerapi.ParseScoredMembers(arr(str("a"), str("1"), str("b"), str("2.5")))
	require.NoError(t, err)
	assert.Equal(t, want, got, "RESP2 flat")
	got, err = scannerapi.ParseScoredMembers(arr(arr(str("a"), scannerapi.Reply{Kind: scannerapi.KindFloat, Float: 1}),
		arr(str("b"), scannerapi.Reply{Kind: scannerapi.KindFloat, Float: 2.5})))
	require.NoError(t, err)
	assert.Equal(t, want, got, "RESP3 pairs")
	got, err = scannerapi.ParseScoredMembers(arr())
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = scannerapi.ParseScoredMembers(arr(str("a")))
	assert.ErrorIs(t, err, scannerapi.ErrMalformedReply)
	_, err = scannerapi.ParseScoredMembers(arr(arr(str("a"))))
	assert.ErrorIs(t, err, scannerapi.ErrMalformedReply)
	_, err = scannerapi.ParseScoredMembers(str("x"))
	assert.ErrorIs(t, err, scannerapi.ErrMalformedReply)
}

func TestParseFCall(t *testing.T) {
	fn, ks, args, ok := scannerapi.ParseFCall(scannerapi.FCall("ff_x", []string{"k1", "k2"}, "a"))
	require.True(t, ok)
	assert.Equal(t, "ff_x", fn)
	assert.Equal(t, []string{"k1", "k2"}, ks)
	assert.Equal(t, []string{"a"}, args)
	_, ks, args, ok = scannerapi.ParseFCall(scannerapi.Command{"fcall_ro", "f", "0"})
	require.True(t, ok)
	assert.Empty(t, ks)
	assert.Empty(t, args)
	for _, c := range []scannerapi.Command{
		{"HGET", "k", "f"}, {"FCALL", "f"}, {"FCALL", "f", "x", "k"}, {"FCALL", "f", "2", "k"}, {"FCALL", "f", "-1"},
	} {
		_, _, _, ok := scannerapi.ParseFCall(c)
		assert.False(t, ok, "%q", c)
	}
}

func TestNoteIsCapped(t *testing.T) {
	var r scannerapi.ScanResult
	for i := 0; i < scannerapi.MaxNotes+5; i++ {
		r.Note("line %d", i)
	}
	require.Len(t, r.Notes, scannerapi.MaxNotes)
	assert.Equal(t, "line 0", r.Notes[0])
}

func TestFirstKey(t *testing.T) {
	k, ok := scannerapi.FirstKey(scannerapi.FCall("ff_resolve_dependency", []string{"a", "b"}, "x"))
	assert.True(t, ok)
	assert.Equal(t, "a", k)
	_, ok = scannerapi.FirstKey(scannerapi.FCall("f", nil, "x"))
	assert.False(t, ok, "an FCALL without KEYS")
	_, ok = scannerapi.FirstKey(scannerapi.Command{"FCALL", "f", "bad"})
	assert.False(t, ok, "a malformed FCALL")
	_, ok = scannerapi.FirstKey(scannerapi.Command{"TIME"})
	assert.False(t, ok)
	_, ok = scannerapi.FirstKey(scannerapi.Command{"ping"})
	assert.False(t, ok)
	k, ok = scannerapi.FirstKey(scannerapi.Command{"HMGET", "key", "f"})
	assert.True(t, ok)
	assert.Equal(t, "key", k)
}
