package lua

import (
	"context"
	"strings"
	"testing"

	testenv "github.com/ffscan/ffscan/sdk/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"
)

func loadRaw(t *testing.T, c valkey.Client, src string) {
	t.Helper()
	require.NoError(t, c.Do(context.Background(), c.B().FunctionLoad().Replace().FunctionCode(src).Build()).Error())
}

func ffscanVersion(t *testing.T, c valkey.Client) string {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Fcall().Function("ffscan_version").Numkeys(0).Build()).ToString()
	require.NoError(t, err)
	return v
}

func TestSourceShape(t *testing.T) {
	t.Parallel()
	src := Source()
	assert.True(t, strings.HasPrefix(src, "#!lua name=flowfabric\n"))
	assert.Equal(t, 1, strings.Count(src, "#!lua"), "exactly one shebang")
	assert.Contains(t, src, "'"+Version()+"'")
	assert.Regexp(t, `^1\.[0-9a-f]{12}(-keyguard)?$`, Version())
	assert.Equal(t, KeyGuarded(), strings.HasSuffix(Version(), "-keyguard"), "the guarded build carries its own version")
}

func TestEnsureOnEmptyServerLoads(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	res, err := New(c, Options{}).Ensure(context.Background())
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, ActionLoaded, res[0].Action)
	assert.Equal(t, Version(), ffscanVersion(t, c))
	v, err := c.Do(context.Background(), c.B().Fcall().Function("ff_version").Numkeys(0).Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "34", v)
}

func TestEnsureKeepsCurrentVersion(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	lib := New(c, Options{})
	_, err := lib.Ensure(context.Background())
	require.NoError(t, err)
	res, err := lib.Ensure(context.Background())
	require.NoError(t, err)
	assert.Equal(t, ActionKept, res[0].Action)
}

func TestEnsureReplacesOlderOwnVersion(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	// An older ffscan build: same shape, other version string.
	old := strings.Replace(Source(), "return '"+Version()+"'", "return '0.000000000000'", 1)
	require.NotEqual(t, old, Source())
	loadRaw(t, c, old)
	require.Equal(t, "0.000000000000", ffscanVersion(t, c))

	res, err := New(c, Options{}).Ensure(context.Background())
	require.NoError(t, err)
	assert.Equal(t, ActionReplaced, res[0].Action)
	assert.Contains(t, res[0].Found, "0.000000000000")
	assert.Equal(t, Version(), ffscanVersion(t, c))
}

// FlowFabric's own library has ff_version "34" and no ffscan_version: it is
// compatible and must be left alone, forced or not.
func TestEnsureLeavesFlowFabricLibrary(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	ff := "#!lua name=flowfabric\nredis.register_function('ff_version', function() return '34' end)\n" +
		"redis.register_function('ff_marker', function() return 'theirs' end)\n"
	loadRaw(t, c, ff)
	for _, force := range []bool{false, true} {
		lib := New(c, Options{ForceReplace: force})
		res, err := lib.Ensure(context.Background())
		require.NoError(t, err)
		assert.Equal(t, ActionFlowFabric, res[0].Action)
		// The host accepts the functions that library lists, not ours.
		assert.Equal(t, []string{"ff_marker", "ff_version"}, res[0].Functions)
		assert.True(t, lib.Serves("ff_marker"))
		assert.False(t, lib.Serves("ff_register_worker"))
		v, err := c.Do(context.Background(), c.B().Fcall().Function("ff_marker").Numkeys(0).Build()).ToString()
		require.NoError(t, err)
		assert.Equal(t, "theirs", v, "FlowFabric's library still loaded (force=%v)", force)
	}
}

// Whether a call writes is the library's own flags, as the server lists
// them: a function flagged no-writes does not, every other one does
// (and before any Ensure, every one does).
func TestWritesFollowsTheLibrarysFlags(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	ff := "#!lua name=flowfabric\nredis.register_function('ff_version', function() return '34' end)\n" +
		"redis.register_function{function_name='ff_peek', callback=function() return 1 end, flags={'no-writes'}}\n"
	loadRaw(t, c, ff)
	lib := New(c, Options{})
	assert.True(t, lib.Writes("ff_peek"), "before Ensure every function counts as a write")
	_, err := lib.Ensure(context.Background())
	require.NoError(t, err)
	assert.False(t, lib.Writes("ff_peek"))
	assert.True(t, lib.Writes("ff_version"))

	ours := New(testenv.New(t).Client(t), Options{})
	_, err = ours.Ensure(context.Background())
	require.NoError(t, err)
	for _, fn := range Functions() {
		assert.True(t, ours.Writes(fn), "%s: the library flags none of its functions no-writes", fn)
	}
}

// The functions a Library serves are those of the flowfabric library it
// loaded, not those of another library loaded on the same server.
func TestServesOnlyTheFlowFabricLibrary(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	loadRaw(t, c, "#!lua name=otherapp\nredis.register_function('otherapp_write', function() return 1 end)\n")
	lib := New(c, Options{})
	res, err := lib.Ensure(context.Background())
	require.NoError(t, err)
	assert.Equal(t, Functions(), res[0].Functions)
	assert.Contains(t, Functions(), "ff_register_worker")
	assert.Contains(t, Functions(), "ffscan_version")
	for _, f := range Functions() {
		assert.True(t, lib.Serves(f), f)
	}
	assert.False(t, lib.Serves("otherapp_write"))
	assert.False(t, lib.Serves(""))
}

func TestEnsureRefusesForeignLibraryUnlessForced(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	loadRaw(t, c, "#!lua name=flowfabric\nredis.register_function('ff_version', function() return '33' end)\n")

	_, err := New(c, Options{}).Ensure(context.Background())
	var inc *IncompatibleLibraryError
	require.ErrorAs(t, err, &inc)
	assert.Contains(t, err.Error(), `ff_version returned "33"`)
	assert.Contains(t, err.Error(), "force")

	// A library without ff_version at all is refused too, saying so.
	loadRaw(t, c, "#!lua name=flowfabric\nredis.register_function('something', function() return 1 end)\n")
	_, err = New(c, Options{}).Ensure(context.Background())
	require.ErrorAs(t, err, &inc)
	assert.Contains(t, err.Error(), "no ff_version function")

	res, err := New(c, Options{ForceReplace: true}).Ensure(context.Background())
	require.NoError(t, err)
	assert.Equal(t, ActionForced, res[0].Action)
	assert.Equal(t, Version(), ffscanVersion(t, c))
}

// A foreign library (another name) registering one of our function names
// makes FUNCTION LOAD fail; the error must surface, not be hidden.
func TestEnsureReportsFunctionNameClash(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	loadRaw(t, c, "#!lua name=other\nredis.register_function('ff_version', function() return 'x' end)\n")
	_, err := New(c, Options{}).Ensure(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ff_version")
}

func TestDoReloadsOnceWhenFunctionMissing(t *testing.T) {
	t.Parallel()
	srv := testenv.New(t)
	c := srv.Client(t)
	lib := New(c, Options{})
	ctx := context.Background()
	_, err := lib.Ensure(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, c.B().FunctionFlush().Build()).Error())

	v, err := lib.Do(ctx, Call{Function: "ff_version"}).ToString()
	require.NoError(t, err, "reloaded and retried")
	assert.Equal(t, "34", v)

	// Pipelined calls reload the same way.
	require.NoError(t, c.Do(ctx, c.B().FunctionFlush().Build()).Error())
	res := lib.DoMulti(ctx, Call{Function: "ff_version"}, Call{Function: "ffscan_version"})
	require.Len(t, res, 2)
	v0, err := res[0].ToString()
	require.NoError(t, err)
	v1, err := res[1].ToString()
	require.NoError(t, err)
	assert.Equal(t, []string{"34", Version()}, []string{v0, v1})

	// A function that does not exist even after reload fails once, clearly.
	err = lib.Do(ctx, Call{Function: "ff_no_such_function"}).Error()
	require.Error(t, err)
	assert.True(t, IsFunctionNotFound(err))
}

func TestEnsureOnCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.NewCluster(t, 3)
	c := cl.Client(t)
	res, err := New(c, Options{}).Ensure(context.Background())
	require.NoError(t, err)
	require.Len(t, res, 3, "loaded on every master")
	for _, r := range res {
		assert.Equal(t, ActionLoaded, r.Action)
	}
	for _, n := range cl.Nodes {
		assert.Equal(t, Version(), ffscanVersion(t, n.Client(t)))
	}
}
