package callbacks

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

type countRec struct {
	mu       sync.Mutex
	commands int
	refused  map[string]int
}

func (r *countRec) CallbackCommands(_ string, n int) {
	r.mu.Lock()
	r.commands += n
	r.mu.Unlock()
}

func (r *countRec) CallbackRefused(_ string, reason string) {
	r.mu.Lock()
	r.refused[reason]++
	r.mu.Unlock()
}

func setup(t *testing.T, info scannerapi.Info, readOnly bool) (*Service, valkey.Client, *countRec) {
	t.Helper()
	srv := testserver.New(t)
	client := srv.Client(t)
	lib := lua.New(client, lua.Options{})
	_, err := lib.Ensure(context.Background())
	require.NoError(t, err)
	rec := &countRec{refused: map[string]int{}}
	svc := New(lib, rec)
	pol, unsupported := PolicyFromInfo(info, readOnly)
	assert.Empty(t, unsupported)
	svc.Register(info.Name, pol)
	return svc, client, rec
}

var testInfo = scannerapi.Info{
	Name:      "t",
	Commands:  []string{"HSET", "HGET", "hgetall", "ZADD", "ZRANGE", "DEL", "GET"},
	Functions: []string{"ff_version"},
}

func TestAllowedBatchRunsPipelinedInOrder(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{
		{"HSET", "ff:test:{fp:1}:h", "a", "1", "b", "2"},
		{"HGET", "ff:test:{fp:1}:h", "a"},
		scannerapi.Command{"FCALL", "ff_version", "0"},
		{"HGETALL", "ff:test:{fp:1}:h"},
		{"GET", "ff:test:missing"},
		{"ZADD", "ff:test:z", "NX", "5", "m"},
		{"ZRANGE", "ff:test:z", "0", "-1", "WITHSCORES"},
		{"DEL", "ff:test:{fp:1}:h", "ff:test:{fp:1}:other"},
		{"HGET", "ff:test:{fp:1}:h", "a"},
	})
	require.NoError(t, err)
	require.Len(t, replies, 9)
	assert.Equal(t, scannerapi.Reply{Kind: scannerapi.KindInt, Int: 2}, replies[0])
	assert.Equal(t, scannerapi.Reply{Kind: scannerapi.KindString, Str: "1"}, replies[1])
	assert.Equal(t, scannerapi.Reply{Kind: scannerapi.KindString, Str: "34"}, replies[2])
	assert.Equal(t, scannerapi.KindArray, replies[3].Kind)
	assert.Equal(t, []scannerapi.Reply{
		{Kind: scannerapi.KindString, Str: "a"}, {Kind: scannerapi.KindString, Str: "1"},
		{Kind: scannerapi.KindString, Str: "b"}, {Kind: scannerapi.KindString, Str: "2"},
	}, replies[3].Array)
	assert.Equal(t, scannerapi.KindNil, replies[4].Kind)
	assert.Equal(t, int64(1), replies[5].Int)
	assert.Equal(t, scannerapi.KindArray, replies[6].Kind)
	assert.Equal(t, int64(1), replies[7].Int)
	assert.Equal(t, scannerapi.KindNil, replies[8].Kind, "the DEL ran before the later HGET: order is kept")
	assert.Equal(t, 9, rec.commands)
	assert.Empty(t, rec.refused)
	// Nothing outside the batch was touched.
	n, err := client.Do(ctx, client.B().Dbsize().Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "only the zset remains")
}

func TestUndeclaredCommandRefused(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{
		{"SADD", "ff:test:s", "x"},      // supported but not declared
		{"FLUSHALL"},                    // not supported at all
		{"HSET", "ff:test:h", "a", "1"}, // fine: the batch continues
	})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.ErrRefused, replies[0].ErrClass)
	assert.Contains(t, replies[0].Err, "undeclared_command")
	assert.Equal(t, scannerapi.ErrRefused, replies[1].ErrClass)
	assert.Contains(t, replies[1].Err, "unsupported_command")
	assert.Equal(t, int64(1), replies[2].Int)
	assert.Equal(t, map[string]int{ReasonUndeclaredCommand: 1, ReasonUnsupported: 1}, rec.refused)
	n, err := client.Do(ctx, client.B().Exists().Key("ff:test:s").Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "the refused SADD did not run")
}

func TestNonFFKeyRefused(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	require.NoError(t, client.Do(ctx, client.B().Set().Key("secret").Value("v").Build()).Error())
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{
		{"GET", "secret"},
		{"DEL", "ff:ok", "secret"},
		{"FCALL", "ff_version", "1", "secret"},
	})
	require.NoError(t, err)
	for i, r := range replies {
		assert.Equal(t, scannerapi.ErrRefused, r.ErrClass, "reply %d", i)
		assert.Contains(t, r.Err, "key_prefix")
	}
	assert.Equal(t, 3, rec.refused[ReasonKeyPrefix])
	v, err := client.Do(ctx, client.B().Get().Key("secret").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
}

func TestFCallChecks(t *testing.T) {
	svc, _, rec := setup(t, testInfo, false)
	replies, err := svc.Exec(context.Background(), "t", []scannerapi.Command{
		{"FCALL", "ff_create_execution", "0"},                      // undeclared function
		{"FCALL", "ff_version", "3", "ff:a"},                       // numkeys beyond the args
		{"FCALL", "ff_version", "-1"},                              // negative
		{"FCALL", "ff_version", "x"},                               // not a number
		{"FCALL", "ff_version"},                                    // no numkeys
		{"FCALL", "ff_version", "2", "ff:{fp:1}:a", "ff:{fp:2}:b"}, // two slots
	})
	require.NoError(t, err)
	assert.Contains(t, replies[0].Err, ReasonUndeclaredFunction)
	for _, r := range replies[1:4] {
		assert.Contains(t, r.Err, ReasonBadNumkeys)
	}
	assert.Contains(t, replies[4].Err, ReasonArity)
	assert.Contains(t, replies[5].Err, ReasonCrossSlot)
	for _, r := range replies {
		assert.Equal(t, scannerapi.ErrRefused, r.ErrClass)
	}
	assert.Equal(t, 1, rec.refused[ReasonUndeclaredFunction])
}

func TestDryRunRefusesWrites(t *testing.T) {
	svc, _, rec := setup(t, testInfo, true)
	replies, err := svc.Exec(context.Background(), "t", []scannerapi.Command{
		{"HGET", "ff:h", "a"},
		{"HSET", "ff:h", "a", "1"},
		{"FCALL", "ff_version", "0"},
	})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.KindNil, replies[0].Kind)
	assert.Contains(t, replies[1].Err, ReasonDryRun)
	assert.Contains(t, replies[2].Err, ReasonDryRun)
	assert.Equal(t, 2, rec.refused[ReasonDryRun])
}

// In shadow mode every write that passes the policy is held back and
// recorded, answered with a shadow refusal (not counted as the item's
// failure); reads run.
func TestShadowHoldsBackWritesAndRecordsThem(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	log := shadow.New(nil, 0)
	pol, _ := PolicyFromInfo(testInfo, false)
	svc.Register("t", pol.WithShadow(log))
	ctx := context.Background()
	require.NoError(t, client.Do(ctx, client.B().Set().Key("ff:s").Value("v").Build()).Error())
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{
		{"HSET", "ff:h", "a", "1"},
		{"HGET", "ff:h", "a"},
		{"GET", "ff:s"},
		{"FCALL", "ff_version", "0"},
		{"DEL", "ff:config:x"},
	})
	require.NoError(t, err)
	// A plain write is answered as if it ran (so that the writes that
	// follow it are sent and recorded too); a function is refused.
	assert.False(t, replies[0].Failed(), "%+v", replies[0])
	assert.Equal(t, scannerapi.Reply{Kind: scannerapi.KindInt, Int: 1}, replies[0])
	assert.Equal(t, scannerapi.KindNil, replies[1].Kind, "the held-back HSET wrote nothing")
	assert.Equal(t, "v", replies[2].Str)
	assert.Equal(t, scannerapi.ErrShadow, replies[3].ErrClass, "no function of the library is flagged no-writes")
	assert.Contains(t, replies[3].Err, "FCALL ff_version held back: the scanner runs in shadow mode")
	assert.Equal(t, scannerapi.ErrRefused, replies[4].ErrClass, "a refusal stays a refusal: only what would run is held back")
	n, err := client.Do(ctx, client.B().Exists().Key("ff:h").Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)
	snap := log.Snapshot(0)
	assert.Equal(t, uint64(2), snap.WouldAct)
	require.Len(t, snap.Latest, 2)
	assert.Equal(t, "FCALL ff_version", snap.Latest[0].String())
	assert.Equal(t, "HSET ff:h", snap.Latest[1].String())
	assert.Equal(t, 2, rec.refused[ReasonShadow])
}

// A tap hears of every write that passed the policy with its keys and
// arguments, whether it ran (act) or was held back (shadow); reads and
// refusals are not decisions.
func TestTapHearsEveryWriteDecision(t *testing.T) {
	svc, client, _ := setup(t, testInfo, false)
	var heard []shadow.Decision
	var mu sync.Mutex
	tap := func(d shadow.Decision) {
		mu.Lock()
		heard = append(heard, d)
		mu.Unlock()
	}
	pol, _ := PolicyFromInfo(testInfo, false)
	svc.Register("t", pol.WithTap(tap))
	ctx := context.Background()
	_, err := svc.Exec(ctx, "t", []scannerapi.Command{{"HSET", "ff:h", "a", "1"}, {"HGET", "ff:h", "a"}, {"DEL", "ff:config:x"}})
	require.NoError(t, err)
	v, err := client.Do(ctx, client.B().Hget().Key("ff:h").Field("a").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "1", v, "the write ran")
	svc.Register("s", pol.WithTap(tap).WithShadow(shadow.New(nil, 0)))
	_, err = svc.Exec(ctx, "s", []scannerapi.Command{{"FCALL", "ff_version", "0"}})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []shadow.Decision{{Command: "HSET", Keys: []string{"ff:h"}, Args: []string{"a", "1"}}, {Command: "FCALL ff_version", Keys: []string{}, Args: []string{}}}, heard)
}

// Every write that runs is audited with its outcome read from its
// reply; reads, refusals and held-back writes are not actions.
func TestAuditHearsEveryWriteThatRan(t *testing.T) {
	svc, _, _ := setup(t, testInfo, false)
	type heard struct {
		cmd, outcome string
	}
	var got []heard
	var mu sync.Mutex
	fn := func(d shadow.Decision, outcome string) {
		mu.Lock()
		got = append(got, heard{d.Command + " " + strings.Join(d.Keys, " "), outcome})
		mu.Unlock()
	}
	pol, _ := PolicyFromInfo(testInfo, false)
	svc.Register("t", pol.WithAudit(fn))
	ctx := context.Background()
	_, err := svc.Exec(ctx, "t", []scannerapi.Command{
		{"HSET", "ff:a", "f", "1"},   // a new field: acted
		{"HGET", "ff:a", "f"},        // a read
		{"HSET", "ff:a", "f", "1"},   // no new field: already done
		{"DEL", "ff:config:x"},       // refused by the policy
		{"DEL", "ff:gone"},           // nothing to delete: already done
		{"FCALL", "ff_version", "0"}, // a function's reply
	})
	require.NoError(t, err)
	svc.Register("s", pol.WithAudit(fn).WithShadow(shadow.New(nil, 0)))
	_, err = svc.Exec(ctx, "s", []scannerapi.Command{{"HSET", "ff:b", "f", "1"}})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []heard{{"HSET ff:a", "acted"}, {"HSET ff:a", "already_done"}, {"DEL ff:gone", "already_done"}, {"FCALL ff_version ", "acted"}}, got)
}

func TestServerErrorsAndTransport(t *testing.T) {
	svc, client, _ := setup(t, testInfo, false)
	ctx := context.Background()
	require.NoError(t, client.Do(ctx, client.B().Set().Key("ff:str").Value("v").Build()).Error())
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{{"HGET", "ff:str", "a"}})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.ErrServer, replies[0].ErrClass)
	assert.Contains(t, replies[0].Err, "WRONGTYPE")

	_, err = svc.Exec(ctx, "nobody", []scannerapi.Command{{"HGET", "ff:str", "a"}})
	assert.Error(t, err, "an unregistered scanner cannot run anything")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = svc.Exec(cctx, "t", []scannerapi.Command{{"HGET", "ff:str", "a"}})
	assert.Error(t, err)
}

func TestFunctionNotFoundReloadsOnce(t *testing.T) {
	svc, client, _ := setup(t, testInfo, false)
	ctx := context.Background()
	require.NoError(t, client.Do(ctx, client.B().FunctionFlush().Build()).Error())
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{{"FCALL", "ff_version", "0"}})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.Reply{Kind: scannerapi.KindString, Str: "34"}, replies[0])
}

func TestUnsupportedDeclarationsReported(t *testing.T) {
	_, unsupported := PolicyFromInfo(scannerapi.Info{Commands: []string{"HGET", "EVAL", "rename"}}, false)
	assert.Equal(t, []string{"EVAL", "RENAME"}, unsupported)
}

// Two instances of one scanner (a hot swap in progress) each run under the
// policy of their own Info, whatever the registry says.
func TestBoundPoliciesAreIndependent(t *testing.T) {
	svc, _, rec := setup(t, testInfo, false)
	ctx := context.Background()
	oldPol, _ := PolicyFromInfo(scannerapi.Info{Name: "t", Commands: []string{"GET"}}, false)
	newPol, _ := PolicyFromInfo(scannerapi.Info{Name: "t", Commands: []string{"HGET"}}, false)
	oldB, newB := svc.Bind("t", oldPol), svc.Bind("t", newPol)

	r, err := oldB.Exec(ctx, []scannerapi.Command{{"GET", "ff:test:x"}, {"HGET", "ff:test:h", "f"}})
	require.NoError(t, err)
	assert.False(t, r[0].Failed())
	assert.Equal(t, scannerapi.ErrRefused, r[1].ErrClass)

	r, err = newB.Callbacks().Exec(ctx, "t", []scannerapi.Command{{"GET", "ff:test:x"}, {"HGET", "ff:test:h", "f"}})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.ErrRefused, r[0].ErrClass)
	assert.False(t, r[1].Failed())
	assert.Equal(t, 2, rec.refused[ReasonUndeclaredCommand])

	_, err = newB.Callbacks().Exec(ctx, "other", []scannerapi.Command{{"HGET", "ff:test:h", "f"}})
	assert.ErrorContains(t, err, `runs scanner "t", not "other"`)
}

// ff:config:* (the partition counts every process must agree on) is
// readable by a plugin and never writable, whatever it declared.
func TestConfigKeysAreReadOnly(t *testing.T) {
	svc, client, rec := setup(t, testInfo, false)
	ctx := context.Background()
	require.NoError(t, client.Do(ctx, client.B().Hset().Key("ff:config:partitions").FieldValue().FieldValue("num_flow_partitions", "256").Build()).Error())
	replies, err := svc.Exec(ctx, "t", []scannerapi.Command{
		{"HGETALL", "ff:config:partitions"},
		{"HSET", "ff:config:partitions", "num_flow_partitions", "8"},
		{"DEL", "ff:config:partitions"},
	})
	require.NoError(t, err)
	assert.False(t, replies[0].Failed(), "reading is allowed: %+v", replies[0])
	for _, r := range replies[1:] {
		assert.Equal(t, scannerapi.ErrRefused, r.ErrClass)
		assert.Contains(t, r.Err, "protected_key")
	}
	assert.Equal(t, 2, rec.refused[ReasonProtectedKey])
	v, err := client.Do(ctx, client.B().Hget().Key("ff:config:partitions").Field("num_flow_partitions").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "256", v, "nothing written")
}

// A scoped command touches only keys its patterns match: a scanner that
// may DEL its own index entries cannot DEL an execution record, and a
// multi-key command is refused when any of its keys is outside.
func TestKeyScopesNarrowCommands(t *testing.T) {
	info := scannerapi.Info{
		Name:     "scoped",
		Commands: []string{"DEL", "HGET"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "DEL", Patterns: []string{"ff:idx:{fp:*}:mine", "ff:test:*:scratch"}},
		},
	}
	svc, client, rec := setup(t, info, false)
	ctx := context.Background()
	core := "ff:exec:{fp:3}:11111111-2222-3333-4444-555555555555:core"
	for _, k := range []string{core, "ff:idx:{fp:3}:mine", "ff:test:{fp:3}:scratch"} {
		require.NoError(t, client.Do(ctx, client.B().Set().Key(k).Value("x").Build()).Error())
	}
	replies, err := svc.Exec(ctx, "scoped", []scannerapi.Command{
		{"DEL", core},
		{"DEL", "ff:idx:{fp:3}:mine"},
		{"DEL", "ff:test:{fp:3}:scratch", core},
		{"HGET", core, "f"}, // unscoped: any ff: key
	})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.ErrRefused, replies[0].ErrClass)
	assert.Contains(t, replies[0].Err, "key_scope")
	assert.Contains(t, replies[0].Err, "ff:idx:{fp:*}:mine")
	assert.False(t, replies[1].Failed(), "%+v", replies[1])
	assert.Equal(t, int64(1), replies[1].Int)
	assert.Equal(t, scannerapi.ErrRefused, replies[2].ErrClass, "one key outside refuses the command")
	assert.Equal(t, scannerapi.KindError, replies[3].Kind, "WRONGTYPE from the server, not a refusal")
	assert.NotEqual(t, scannerapi.ErrRefused, replies[3].ErrClass)
	assert.Equal(t, 2, rec.refused[ReasonKeyScope])
	n, err := client.Do(ctx, client.B().Exists().Key(core, "ff:test:{fp:3}:scratch").Build()).AsInt64()
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "the refused DELs deleted nothing")
}

// An FCALL's keys obey the rules of a write command's, and only the
// flowfabric library's functions run: ff:config:* is refused in either
// argument order, a scoped function's keys must match its patterns, and
// a function of another library loaded on the same server is refused
// even when declared. Nothing refused writes anything.
func TestFCallKeysFollowTheWriteRules(t *testing.T) {
	info := scannerapi.Info{
		Name:      "fn",
		Functions: []string{"ff_register_worker", "ff_heartbeat_worker", "otherapp_write"},
		FunctionScopes: []scannerapi.FunctionScope{
			{Function: "ff_register_worker", Patterns: []string{"ff:worker:*:alive", "ff:worker:*:caps", "ff:idx:*:workers"}},
		},
	}
	svc, client, rec := setup(t, info, false)
	ctx := context.Background()
	require.NoError(t, client.Do(ctx, client.B().FunctionLoad().FunctionCode(
		"#!lua name=otherapp\nredis.register_function('otherapp_write', function(keys, args) redis.call('SET', 'otherapp:owned', '1') return 1 end)\n").Build()).Error())
	before := keyspace(t, client)
	register := func(alive, caps, idx string) scannerapi.Command {
		return scannerapi.FCall("ff_register_worker", []string{alive, caps, idx}, "w1", "worker-1", "default", "", "30000", "1700000000000")
	}
	// Keys whose hash tag is the protected key's name share its slot.
	cfg, tagged := "ff:config:partitions", "ff:worker:{ff:config:partitions}"
	replies, err := svc.Exec(ctx, "fn", []scannerapi.Command{
		register(tagged+":alive", cfg, tagged+":idx"),
		register(cfg, cfg, cfg),
		register("ff:evil:a", "ff:evil:a", "ff:evil:a"),
		scannerapi.FCall("otherapp_write", []string{"ff:x"}),
		scannerapi.FCall("ff_heartbeat_worker", []string{"ff:config:x", "ff:config:x"}, "1"), // unscoped: ff:config: still refused
	})
	require.NoError(t, err)
	want := []string{ReasonProtectedKey, ReasonProtectedKey, ReasonKeyScope, ReasonUnknownFunction, ReasonProtectedKey}
	for i, r := range replies {
		assert.Equal(t, scannerapi.ErrRefused, r.ErrClass, "command %d: %+v", i, r)
		assert.Contains(t, r.Err, "refused: "+want[i]+":", "command %d", i)
	}
	assert.Contains(t, replies[0].Err, `"ff:config:partitions"`)
	assert.Contains(t, replies[2].Err, "ff:worker:*:alive")
	assert.Contains(t, replies[3].Err, "not a function of the flowfabric library")
	assert.Equal(t, 3, rec.refused[ReasonProtectedKey])
	assert.Equal(t, 1, rec.refused[ReasonKeyScope])
	assert.Equal(t, 1, rec.refused[ReasonUnknownFunction])
	assert.Equal(t, before, keyspace(t, client), "nothing written")

	// Within its scope the call runs.
	replies, err = svc.Exec(ctx, "fn", []scannerapi.Command{register("ff:worker:{w1}:alive", "ff:worker:{w1}:caps", "ff:idx:{w1}:workers")})
	require.NoError(t, err)
	assert.False(t, replies[0].Failed(), "%+v", replies[0])
}

// keyspace is every key with its type.
func keyspace(t *testing.T, c valkey.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	ks, err := c.Do(ctx, c.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	out := map[string]string{}
	for _, k := range ks {
		typ, err := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
		require.NoError(t, err)
		out[k] = typ
	}
	return out
}
