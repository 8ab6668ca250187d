package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
)

func TestEdgeGroupPolicyAndWaitpointSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)

	fid := e.createFlow(t)
	down := keys.NewExecutionIDForFlow(e.c.Partitions(), fid)
	changed, err := e.c.SetEdgeGroupPolicy(ctx, fid, down, client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"})
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = e.c.SetEdgeGroupPolicy(ctx, fid, down, client.EdgeGroupPolicy{Variant: "any_of", OnSatisfied: "cancel_remaining"})
	require.NoError(t, err)
	assert.False(t, changed, "restating the policy changes nothing")
	var ve *client.ValidationError
	_, err = e.c.SetEdgeGroupPolicy(ctx, fid, down, client.EdgeGroupPolicy{Variant: "quorum", OnSatisfied: "let_run"})
	require.ErrorAs(t, err, &ve, "a quorum needs K")
	_, err = e.c.SetEdgeGroupPolicy(ctx, fid, down, client.EdgeGroupPolicy{Variant: "most_of"})
	require.ErrorAs(t, err, &ve)
	_, err = e.c.SetEdgeGroupPolicy(ctx, keys.NewFlowID(), down, client.EdgeGroupPolicy{Variant: "all_of"})
	require.ErrorIs(t, err, client.ErrFlowNotFound)

	p0 := keys.Partition{Family: keys.FamilyFlow, Index: 0}
	current, verifying, err := e.c.WaitpointKeys(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, "", current)
	assert.Empty(t, verifying)
	require.NoError(t, e.c.RotateWaitpointSecret(ctx, "k1", []byte("secret-one"), time.Hour))
	require.NoError(t, e.c.RotateWaitpointSecret(ctx, "k1", []byte("secret-one"), time.Hour), "the same key again is a no-op")
	err = e.c.RotateWaitpointSecret(ctx, "k1", []byte("another"), time.Hour)
	var se *client.ScriptError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, client.Code("rotation_conflict"), se.Code)
	require.NoError(t, e.c.RotateWaitpointSecret(ctx, "k2", []byte("secret-two"), time.Hour))
	current, verifying, err = e.c.WaitpointKeys(ctx, p0)
	require.NoError(t, err)
	assert.Equal(t, "k2", current)
	require.Len(t, verifying, 1)
	assert.Equal(t, "k1", verifying[0].Kid)
	assert.WithinDuration(t, time.Now().Add(time.Hour), verifying[0].Expires, time.Minute)
	require.ErrorAs(t, e.c.RotateWaitpointSecret(ctx, "a:b", []byte("x"), 0), &ve)
}
