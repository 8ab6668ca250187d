package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/testserver"
)

// TestExampleRunsToCompletion runs the example against a throwaway server.
func TestExampleRunsToCompletion(t *testing.T) {
	srv := testserver.New(t)
	var out bytes.Buffer
	err := run(context.Background(), config{addr: srv.Addr, n: 10, workers: 2, timeout: time.Minute}, &out)
	require.NoError(t, err, out.String())
	assert.Contains(t, out.String(), "done: 8 succeeded, 2 failed")
	assert.Equal(t, 10, strings.Count(out.String(), "-> "), "every execution handled once")
}
