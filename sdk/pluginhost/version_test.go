package pluginhost_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func launchArgs(t *testing.T, cb pluginhost.Callbacks, args ...string) (*pluginhost.Plugin, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := pluginhost.Launch(ctx, pluginhost.LaunchConfig{
		Path: testPlugin(t), Args: args, Callbacks: cb, StartTimeout: 10 * time.Second,
		Logger: hclog.NewNullLogger(),
	})
	if p != nil {
		t.Cleanup(func() {
			p.Kill()
			waitGone(t, p.Pid(), 5*time.Second)
		})
	}
	return p, err
}

// A plugin whose scanners were written against the oldest supported
// version negotiates that version and works.
func TestOlderCompatibleAPIVersionRuns(t *testing.T) {
	require.Less(t, pluginhost.MinAPIVersion, scannerapi.APIVersion, "this test needs two supported versions")
	cb := &echoCallbacks{}
	p, err := launchArgs(t, cb, "-api-version", "1")
	require.NoError(t, err)
	assert.Equal(t, 1, p.APIVersion())
	s := scannerByName(t, p, "echo")
	assert.Equal(t, 1, s.Info().APIVersion)
	require.NoError(t, s.Configure(context.Background(), map[string]string{"prefix": "v1:"}))
	res, err := s.ScanPartition(context.Background(), nil, sampleRequest())
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Processed)
	assert.Equal(t, "v1:a", res.Notes[0])
	assert.False(t, pluginhost.LiveConfigure(p.APIVersion()))

	// The current SDK negotiates the newest version.
	p2, err := launchArgs(t, cb)
	require.NoError(t, err)
	assert.Equal(t, scannerapi.APIVersion, p2.APIVersion())
	assert.True(t, pluginhost.LiveConfigure(p2.APIVersion()))
}

// A plugin from a newer SDK (a protocol version this host does not run) is
// refused at the handshake with a message naming both sides' versions.
func TestIncompatibleAPIVersionIsRefused(t *testing.T) {
	_, err := launchArgs(t, nil, "-raw-version", "99")
	require.Error(t, err)
	var verr *pluginhost.APIVersionError
	require.True(t, errors.As(err, &verr), "got %v", err)
	assert.Equal(t, 99, verr.Plugin)
	assert.Equal(t, pluginhost.MinAPIVersion, verr.Min)
	assert.Equal(t, scannerapi.APIVersion, verr.Max)
	assert.Contains(t, err.Error(), "speaks scanner API version 99; this host runs versions 1 to 2")
	assert.Contains(t, err.Error(), "upgrade ffscan")

	// A version older than the host runs says to rebuild instead.
	old := &pluginhost.APIVersionError{Path: "/p/x", Plugin: 0, Min: 1, Max: 2}
	assert.Equal(t, "plugin /p/x speaks an unknown scanner API version; this host runs versions 1 to 2: rebuild the plugin against a compatible sdk/scannerapi", old.Error())
}

// Serve refuses scanners that declare an unsupported version, or
// disagree on it, before any handshake.
func TestServeRefusesUnsupportedDeclaredVersion(t *testing.T) {
	_, err := launchArgs(t, nil, "-api-version", "7")
	require.Error(t, err)
	in := scannerapi.Info{Name: "x", APIVersion: 7}
	assert.ErrorContains(t, scannerapi.ValidateInfo(in), "APIVersion is 7; this SDK supports 1 to 2")
}
