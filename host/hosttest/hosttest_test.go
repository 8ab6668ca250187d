package hosttest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/hosttest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// sweeper removes every due member of ff:idx:{p}:lease_expiry it is given
// and, to show the host's enforcement, tries one command it did not
// declare.
type sweeper struct{}

func (sweeper) Info() scannerapi.Info {
	return scannerapi.Info{
		Name: "sweeper", Version: "1", APIVersion: scannerapi.APIVersion,
		Family: keys.FamilyFlow, DefaultInterval: time.Second, DefaultBatch: 10,
		Sources:  []scannerapi.CandidateSource{{Name: "due", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lease_expiry"}},
		Commands: []string{"ZREM"},
	}
}

func (sweeper) Configure(context.Context, map[string]string) error { return nil }

func (sweeper) ScanPartition(ctx context.Context, h scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	cmds := []scannerapi.Command{{"DEL", "ff:undeclared"}}
	for _, c := range req.Candidates {
		cmds = append(cmds, scannerapi.Command{"ZREM", c.Key, c.Member})
	}
	replies, err := h.Exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	res := &scannerapi.ScanResult{}
	for _, r := range replies[1:] {
		if r.Failed() {
			res.Errors = append(res.Errors, scannerapi.ErrorCount{Class: r.ErrClass, Code: "zrem", Count: 1})
		} else {
			res.Processed++
		}
	}
	return res, nil
}

// A linked run through the real host: the scheduler fetches the due
// members, the callback service runs the declared ZREMs and refuses the
// undeclared DEL, and the report says so.
func TestRunGoesThroughTheHost(t *testing.T) {
	p3 := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: 3}).LeaseExpiry()
	p9 := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: 9}).LeaseExpiry()
	linked, plugin := hosttest.Run(t, scannertest.Case{
		New: func() scannerapi.Scanner { return sweeper{} },
		Fixtures: []scannerapi.Command{
			{"ZADD", p3, "1", "a", "2", "b"},
			{"ZADD", p9, "1", "c", "99999999999999", "later"},
		},
		Check: func(t testing.TB, r scannertest.Report, c valkey.Client) {
			left, err := c.Do(context.Background(), c.B().Zrange().Key(p9).Min("0").Max("-1").Build()).AsStrSlice()
			assert.NoError(t, err)
			assert.Equal(t, []string{"later"}, left, "only the member not yet due is left")
		},
	})
	assert.Equal(t, "linked", linked.Mode)
	assert.Empty(t, plugin.Mode, "no plugin run without Case.Plugin")
	assert.Equal(t, 1, linked.Cycles)
	assert.Equal(t, 2, linked.Scanned, "partitions 3 and 9 had candidates")
	assert.Equal(t, int64(3), linked.Processed)
	assert.Equal(t, 3, linked.Commands["ZREM"])
	assert.Equal(t, 2, linked.Refused["undeclared_command"], "the host refused the undeclared DEL once per partition")
	assert.Contains(t, linked.Keys, p9)
	assert.NotContains(t, linked.Keys, p3)
}
