package lua

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/testserver"
)

// guardedLibrary is the key-guarded build of our library: the loader's own
// source under the ffscan_keyguard tag, else the plain source guarded here.
func guardedLibrary() string {
	if KeyGuarded() {
		return Source()
	}
	return withKeyGuard(Source())
}

// probeLibrary exercises the guard itself: a small library written the way
// library files are (plain redis.call), guarded by the same rewrite.
const probeLibrary = `#!lua name=ffkgprobe
redis.register_function('kg_declared', function(keys, args)
  redis.call('SET', keys[1], 'x')
  return redis.call('GET', keys[1])
end)
redis.register_function('kg_undeclared', function(keys, args)
  return redis.call('SET', 'kg:not-declared', 'x')
end)
redis.register_function('kg_undeclared_pcall', function(keys, args)
  return redis.pcall('GET', 'kg:not-declared')
end)
redis.register_function('kg_alias', function(keys, args)
  local call = redis.call
  return call('DEL', keys[1], 'kg:not-declared')
end)
redis.register_function('kg_unknown_command', function(keys, args)
  return redis.call('SORT', keys[1])
end)
redis.register_function{function_name = 'kg_table_form', callback = function(keys, args)
  return redis.call('HSET', 'kg:not-declared', 'f', 'v')
end}
`

func fcall(c valkey.Client, fn string, keys ...string) valkey.ValkeyResult {
	return c.Do(context.Background(), c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Build())
}

func keyCount(t *testing.T, c valkey.Client) int64 {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Dbsize().Build()).AsInt64()
	require.NoError(t, err)
	return n
}

// TestKeyGuardRefusesUndeclaredKeys shows the guard failing a function that
// touches a key outside its KEYS (directly, through pcall, through an alias,
// with the table form of register_function) or runs a command whose key
// positions it does not know, and letting declared keys through.
func TestKeyGuardRefusesUndeclaredKeys(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	loadRaw(t, c, withKeyGuard(probeLibrary))

	v, err := fcall(c, "kg_declared", "kg:declared").ToString()
	require.NoError(t, err)
	assert.Equal(t, "x", v)

	for _, fn := range []string{"kg_undeclared", "kg_undeclared_pcall", "kg_alias", "kg_table_form"} {
		err := fcall(c, fn, "kg:declared").Error()
		require.Error(t, err, fn)
		assert.Contains(t, err.Error(), "FFKEYGUARD "+fn+" touched kg:not-declared", fn)
	}
	err = fcall(c, "kg_unknown_command", "kg:declared").Error()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "FFKEYGUARD kg_unknown_command runs SORT")

	// Refused before the command ran: only the declared key exists.
	assert.Equal(t, int64(1), keyCount(t, c))
}

// TestKeyGuardedLibraryLoads: the whole guarded library loads and answers.
func TestKeyGuardedLibraryLoads(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	c := srv.Client(t)
	loadRaw(t, c, guardedLibrary())
	v, err := fcall(c, "ff_version").ToString()
	require.NoError(t, err)
	assert.Equal(t, ContractVersion, v)
}
