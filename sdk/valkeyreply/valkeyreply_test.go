package valkeyreply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// Errors a real server gives for the cluster's state, not the item, are
// transport (try again); item errors stay server.
func TestClusterTransientsAreTransport(t *testing.T) {
	ctx := context.Background()

	// A write to a replica (a demoted primary after failover): READONLY.
	primary := testserver.New(t)
	host, port, _ := splitAddr(primary.Addr)
	replica := testserver.New(t, testserver.WithArgs("--replicaof", host, port))
	rc := replica.Client(t)
	r := Of(rc.Do(ctx, rc.B().Set().Key("ff:x").Value("1").Build()))
	require.Equal(t, scannerapi.KindError, r.Kind)
	assert.Contains(t, r.Err, "READONLY")
	assert.Equal(t, scannerapi.ErrTransport, r.ErrClass)

	// A key another node owns, asked of a node directly: MOVED.
	cluster := testserver.NewCluster(t, 3)
	var moved scannerapi.Reply
	for _, addr := range cluster.Addrs() {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		require.NoError(t, err)
		res := Of(c.Do(ctx, c.B().Get().Key("ff:exec:{fp:1}:x").Build()))
		c.Close()
		if res.Kind == scannerapi.KindError {
			moved = res
			break
		}
	}
	require.Equal(t, scannerapi.KindError, moved.Kind, "one of three nodes does not own the slot")
	assert.Contains(t, moved.Err, "MOVED")
	assert.Equal(t, scannerapi.ErrTransport, moved.ErrClass)

	// An error about the item itself stays server.
	pc := primary.Client(t)
	require.NoError(t, pc.Do(ctx, pc.B().Set().Key("ff:s").Value("v").Build()).Error())
	r = Of(pc.Do(ctx, pc.B().Hget().Key("ff:s").Field("f").Build()))
	assert.Contains(t, r.Err, "WRONGTYPE")
	assert.Equal(t, scannerapi.ErrServer, r.ErrClass)
}

func splitAddr(addr string) (string, string, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return addr, "", nil
}

// Write gives, byte for byte, the packed form of what Of gives, for every
// kind of reply a real server sends (RESP3, as the host's client speaks).
func TestWriteMatchesOf(t *testing.T) {
	ctx := context.Background()
	srv := testserver.New(t)
	c := srv.Client(t)
	for _, cmd := range []valkey.Completed{
		c.B().Set().Key("ff:s").Value("v").Build(),
		c.B().Hset().Key("ff:h").FieldValue().FieldValue("a", "1").FieldValue("b", "").Build(),
		c.B().Zadd().Key("ff:z").ScoreMember().ScoreMember(1.5, "m1").ScoreMember(-2, "m2").Build(),
	} {
		require.NoError(t, c.Do(ctx, cmd).Error())
	}
	cases := map[string]valkey.Completed{
		"string":       c.B().Get().Key("ff:s").Build(),
		"nil":          c.B().Get().Key("ff:missing").Build(),
		"int":          c.B().Incr().Key("ff:n").Build(),
		"zero":         c.B().Exists().Key("ff:missing").Build(),
		"map":          c.B().Hgetall().Key("ff:h").Build(),
		"empty map":    c.B().Hgetall().Key("ff:missing").Build(),
		"array of nil": c.B().Hmget().Key("ff:h").Field("a", "x", "b").Build(),
		"scored pairs": c.B().Zrange().Key("ff:z").Min("0").Max("-1").Withscores().Build(),
		"double":       c.B().Zscore().Key("ff:z").Member("m1").Build(),
		"empty array":  c.B().Zrange().Key("ff:missing").Min("0").Max("-1").Build(),
		"wrong type":   c.B().Hget().Key("ff:s").Field("f").Build(),
		"status":       c.B().Ping().Build(),
		"nested":       c.B().Eval().Script("return {1, {'a', {2, false}}, 'b', true}").Numkeys(0).Build(),
		"script error": c.B().Eval().Script("return redis.error_reply('MY_CODE detail')").Numkeys(0).Build(),
		"set":          c.B().Smembers().Key("ff:missing").Build(),
		"booleans":     c.B().Eval().Script("redis.setresp(3); return {true, false}").Numkeys(0).Build(),
		"big number":   c.B().Eval().Script("return 12345678901234567890").Numkeys(0).Build(),
	}
	for name, cmd := range cases {
		r := c.Do(ctx, cmd)
		want := pluginhost.NewReplyWriter(1)
		of := Of(r)
		want.Reply(&of)
		got := pluginhost.NewReplyWriter(1)
		Write(got, r)
		assert.Equal(t, want.Bytes(), got.Bytes(), name)
		assert.Equal(t, pluginhost.ReplySize(of), got.Size(), name)
		assert.Equal(t, 1, got.Replies(), name)
	}
	// A result without a reply (the client is closed): as Of gives it.
	c.Close()
	r := c.Do(ctx, c.B().Get().Key("ff:s").Build())
	want := pluginhost.NewReplyWriter(1)
	of := Of(r)
	require.Equal(t, scannerapi.ErrTransport, of.ErrClass)
	want.Reply(&of)
	got := pluginhost.NewReplyWriter(1)
	Write(got, r)
	assert.Equal(t, want.Bytes(), got.Bytes())
}

// A script stopped at a key its slot's migration had moved ran up to that
// key: transient (its outcome unknown, the item not at fault), as Redis 7
// and Valkey word it, with or without an ERR prefix.
func TestNonLocalKeyIsTransient(t *testing.T) {
	msg := "Script attempted to access a non local key in a cluster node script: ff_mark_lease_expired_if_due, on @user_function:178."
	assert.True(t, NonLocalKey(msg))
	assert.True(t, NonLocalKey("ERR "+msg))
	assert.False(t, NonLocalKey("ERR Error running script"))
}
