package scanutil_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

func TestExplainCandidate(t *testing.T) {
	t.Parallel()
	const eid = "{fp:3}:00000000-0000-4000-8000-000000000001"
	a := scannerapi.Candidate{Source: "a", Key: "k1", Member: eid}
	b := scannerapi.Candidate{Source: "b", Key: "k2", Member: eid}
	b2 := scannerapi.Candidate{Source: "b", Key: "k3", Member: eid}
	other := scannerapi.Candidate{Source: "a", Key: "k1", Member: "{fp:3}:00000000-0000-4000-8000-000000000002"}
	for _, tc := range []struct {
		name    string
		cands   []scannerapi.Candidate
		sources []string
		want    scannerapi.Candidate
		found   bool
	}{
		{"none", nil, nil, scannerapi.Candidate{}, false},
		{"another member only", []scannerapi.Candidate{other}, nil, scannerapi.Candidate{}, false},
		{"any source: the first", []scannerapi.Candidate{other, b, a}, nil, b, true},
		{"of a source", []scannerapi.Candidate{a, b, b2}, []string{"b"}, b, true},
		{"of one of the sources", []scannerapi.Candidate{other, b2, a}, []string{"a", "b"}, b2, true},
		{"no candidate of the source", []scannerapi.Candidate{a}, []string{"b"}, scannerapi.Candidate{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &scannerapi.ExplainRequest{ExecutionID: eid, Scan: scannerapi.ScanRequest{Candidates: tc.cands}}
			c, ok := scanutil.ExplainCandidate(req, tc.sources...)
			assert.Equal(t, tc.found, ok)
			assert.Equal(t, tc.want, c)
		})
	}
}

func TestIntakeExplain(t *testing.T) {
	t.Parallel()
	part := keys.Partition{Family: keys.FamilyFlow, Index: 3}
	other := keys.Partition{Family: keys.FamilyFlow, Index: 4}
	eid := func(p keys.Partition) keys.ExecutionID {
		id, err := keys.ExecutionIDIn(p, keys.NewUUID())
		require.NoError(t, err)
		return id
	}
	mine, backedOff, foreign := eid(part), eid(part), eid(other)
	failures := scannerapi.NewFailureTracker()
	for range scannerapi.DefaultFailureThreshold {
		failures.RecordFailure("p/"+backedOff.String(), 7)
	}
	until, off := failures.BackoffUntil("p/"+backedOff.String(), 8)
	require.True(t, off)
	in := scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Sources: []string{"src"},
		Remove: []keys.IDForm{keys.IDInvalid}, Failures: failures, BackoffPrefix: "p/"}
	scan := &scannerapi.ScanRequest{Partition: part, Cycle: 8}
	cand := func(source, member string) scannerapi.Candidate {
		return scannerapi.Candidate{Source: source, Key: "ff:idx:{fp:3}:x", Member: member}
	}
	for _, tc := range []struct {
		name    string
		c       scannerapi.Candidate
		id      keys.ExecutionID
		reason  string // "" for a candidate the scan takes
		detail  string
		backoff uint64
	}{
		{name: "taken", c: cand("src", mine.String()), id: mine},
		{name: "backed off", c: cand("src", backedOff.String()), id: backedOff, reason: "backed_off",
			detail: "backed off after 3 failed attempts in a row", backoff: until},
		{name: "garbage, removed", c: cand("src", "junk"), reason: "invalid_member",
			detail: `the member "junk" of ff:idx:{fp:3}:x is not a usable id (invalid member): never acted on, the next scan removes it`},
		{name: "foreign, left", c: cand("src", foreign.String()), reason: "invalid_member",
			detail: "(foreign member): never acted on, left in place"},
		{name: "another source", c: cand("other", mine.String()), reason: "other_source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, e := in.Explain(tc.c, scan)
			assert.Equal(t, tc.id, id)
			if tc.reason == "" {
				assert.Nil(t, e)
				return
			}
			require.NotNil(t, e)
			assert.Equal(t, scannerapi.VerdictSkips, e.Verdict)
			assert.Equal(t, tc.reason, e.Reason)
			assert.Contains(t, e.Detail, tc.detail)
			assert.Equal(t, tc.backoff, e.BackoffUntilCycle)
		})
	}
	// Explaining changes nothing: the tracker counts what it counted.
	assert.Equal(t, 3, failures.Failures("p/"+backedOff.String()))
}
