package pluginhost

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// An explanation's Host sends reads on and refuses everything else
// without sending it: an Explain that tries to write changes nothing.
func TestReadOnlyHostRefusesWrites(t *testing.T) {
	var sent []scannerapi.Command
	inner := scannerapi.HostFunc(func(_ context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		sent = append(sent, cmds...)
		out := make([]scannerapi.Reply, len(cmds))
		for i := range out {
			out[i] = scannerapi.Reply{Kind: scannerapi.KindString, Str: cmds[i][0]}
		}
		return out, nil
	})
	rs, err := ReadOnly(inner).Exec(context.Background(), []scannerapi.Command{
		{"HMGET", "ff:exec:{fp:1}:x:core", "lifecycle_phase"},
		{"ZREM", "ff:idx:{fp:1}:lease_expiry", "x"},
		scannerapi.FCall("ff_mark_lease_expired_if_due", []string{"k"}, "x"),
		scannerapi.PGCall("expire_lapsed_lease", "1"),
		{"zscore", "ff:idx:{fp:1}:lease_expiry", "x"},
		{},
	})
	require.NoError(t, err)
	require.Len(t, rs, 6)
	assert.Equal(t, []scannerapi.Command{{"HMGET", "ff:exec:{fp:1}:x:core", "lifecycle_phase"}, {"zscore", "ff:idx:{fp:1}:lease_expiry", "x"}}, sent)
	assert.Equal(t, "HMGET", rs[0].Str)
	for _, i := range []int{1, 2, 3, 5} {
		assert.Equal(t, scannerapi.ErrRefused, rs[i].ErrClass, "command %d", i)
	}
	assert.Equal(t, "zscore", rs[4].Str, "replies stay in order")
}

// A linked scanner without Explain answers ErrNotExplained.
func TestExplainOfALinkedScannerWithoutIt(t *testing.T) {
	_, err := Explain(context.Background(), Linked(plainScanner{}, nil), nil, &scannerapi.ExplainRequest{})
	require.ErrorIs(t, err, scannerapi.ErrNotExplained)
}

type plainScanner struct{}

func (plainScanner) Info() scannerapi.Info                              { return scannerapi.Info{Name: "plain"} }
func (plainScanner) Configure(context.Context, map[string]string) error { return nil }
func (plainScanner) ScanPartition(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	return &scannerapi.ScanResult{}, nil
}
