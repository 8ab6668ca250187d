package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
)

// A quota policy with a sliding window and a concurrency cap, on a real
// server: admissions, repeats, both refusals, release, bad input.
func TestQuotaAdmissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)

	var ve *client.ValidationError
	_, err := e.c.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{Window: 1500 * time.Millisecond})
	require.ErrorAs(t, err, &ve)
	_, err = e.c.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{Window: time.Minute, MaxRequests: -1})
	require.ErrorAs(t, err, &ve)

	rate, err := e.c.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{Window: time.Minute, MaxRequests: 1})
	require.NoError(t, err)
	again, err := e.c.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{ID: rate.ID, Window: time.Minute, MaxRequests: 5})
	require.NoError(t, err)
	assert.True(t, again.Existed, "an existing policy is left as it is")

	e1, e2 := e.create(t, client.CreateRequest{Kind: "k"}), e.create(t, client.CreateRequest{Kind: "k"})
	a, err := e.c.Admit(ctx, rate.ID, e1)
	require.NoError(t, err)
	assert.Equal(t, client.Admission{Admitted: true}, a)
	a, err = e.c.Admit(ctx, rate.ID, e1)
	require.NoError(t, err)
	assert.True(t, a.AlreadyAdmitted)
	a, err = e.c.Admit(ctx, rate.ID, e2)
	require.NoError(t, err)
	assert.True(t, a.RateExceeded)
	assert.Greater(t, a.RetryAfter, 50*time.Second, "until the first admission leaves the minute")
	assert.LessOrEqual(t, a.RetryAfter, time.Minute)

	conc, err := e.c.CreateQuotaPolicy(ctx, client.CreateQuotaRequest{Window: time.Minute, MaxConcurrent: 1})
	require.NoError(t, err)
	a, err = e.c.Admit(ctx, conc.ID, e1)
	require.NoError(t, err)
	require.True(t, a.Admitted)
	a, err = e.c.Admit(ctx, conc.ID, e2)
	require.NoError(t, err)
	assert.True(t, a.ConcurrencyExceeded)
	require.NoError(t, e.c.ReleaseAdmission(ctx, conc.ID, e1))
	require.NoError(t, e.c.ReleaseAdmission(ctx, conc.ID, e1), "releasing again is harmless")
	a, err = e.c.Admit(ctx, conc.ID, e2)
	require.NoError(t, err)
	assert.True(t, a.Admitted)
	counter, err := e.do(t, "GET", keys.Quota(e.c.Partitions(), conc.ID).Concurrency()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "1", counter, "never below zero, one admitted now")

	_, err = e.c.Admit(ctx, keys.NewQuotaID(), e1)
	require.ErrorIs(t, err, client.ErrQuotaPolicyNotFound)
}
