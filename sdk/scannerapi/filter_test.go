package scannerapi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	testenv "github.com/ffscan/ffscan/sdk/testserver"
)

func TestParseFilter(t *testing.T) {
	f, err := scannerapi.ParseFilter(map[string]string{"namespace": "tenant-a", "instance_tag": "pool=blue=1"})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.Filter{Namespace: "tenant-a", TagKey: "pool", TagValue: "blue=1"}, f)
	assert.False(t, f.IsNoop())
	f, err = scannerapi.ParseFilter(map[string]string{"instance_tag": "pool="})
	require.NoError(t, err)
	assert.Equal(t, scannerapi.Filter{TagKey: "pool"}, f)
	_, err = scannerapi.ParseFilter(map[string]string{"instance_tag": "pool"})
	assert.Error(t, err)
	_, err = scannerapi.ParseFilter(map[string]string{"instance_tag": "=x"})
	assert.Error(t, err)
	f, err = scannerapi.ParseFilter(nil)
	require.NoError(t, err)
	assert.True(t, f.IsNoop())
}

// Keep against a real server: one Exec for the whole batch; every doubt
// (bad id, missing core, missing tag, wrong type) skips.
func TestFilterKeep(t *testing.T) {
	srv := testenv.New(t)
	client := srv.Client(t)
	ctx := context.Background()
	part := keys.Partition{Family: keys.FamilyFlow, Index: 3}
	mk := func() keys.ExecutionID {
		id, err := keys.ExecutionIDIn(part, keys.NewUUID())
		require.NoError(t, err)
		return id
	}
	match, otherNS, noTag, noCore, wrongType := mk(), mk(), mk(), mk(), mk()
	do := func(args ...string) {
		require.NoError(t, client.Do(ctx, client.B().Arbitrary(args...).Build()).Error())
	}
	do("HSET", keys.Exec(match).Core(), "namespace", "a")
	do("HSET", keys.Exec(match).Tags(), "pool", "blue")
	do("HSET", keys.Exec(otherNS).Core(), "namespace", "b")
	do("HSET", keys.Exec(otherNS).Tags(), "pool", "blue")
	do("HSET", keys.Exec(noTag).Core(), "namespace", "a")
	do("HSET", keys.Exec(noCore).Tags(), "pool", "blue")
	do("SET", keys.Exec(wrongType).Core(), "x")
	do("HSET", keys.Exec(wrongType).Tags(), "pool", "blue")

	batches := 0
	host := scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		batches++
		return scannertest.Exec(ctx, client, cmds)
	})
	members := []string{match.String(), otherNS.String(), noTag.String(), noCore.String(), wrongType.String(), "not-an-id"}

	f := scannerapi.Filter{Namespace: "a", TagKey: "pool", TagValue: "blue"}
	keep, err := f.Keep(ctx, host, members)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, false, false, false, false}, keep)
	assert.Equal(t, 1, batches, "one Exec for all candidates")

	keep, err = scannerapi.Filter{TagKey: "pool", TagValue: "blue"}.Keep(ctx, host, members)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, false, true, true, false}, keep)

	batches = 0
	keep, err = scannerapi.Filter{}.Keep(ctx, host, members)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, true, true, true, true}, keep)
	assert.Zero(t, batches, "a no-op filter reads nothing")
}
