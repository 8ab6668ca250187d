package httpapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerServesUntilStop(t *testing.T) {
	t.Parallel()
	s := NewServer(ServerConfig{Listen: "127.0.0.1:0"}, prometheus.NewRegistry(), fakeSource{})
	assert.Empty(t, s.Addr(), "nothing listens before Start")
	require.NoError(t, s.Stop(context.Background()), "stop before start")
	require.NoError(t, s.Start(context.Background()))
	resp, err := http.Get("http://" + s.Addr() + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	// The address is taken: a second server on it fails to start, naming it.
	other := NewServer(ServerConfig{Listen: s.Addr()}, prometheus.NewRegistry(), fakeSource{})
	assert.ErrorContains(t, other.Start(context.Background()), "http.listen "+s.Addr())

	require.NoError(t, s.Stop(context.Background()))
	_, err = net.Dial("tcp", s.Addr())
	assert.Error(t, err, "nothing listens after Stop")
}
