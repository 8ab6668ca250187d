package scanutil_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

func TestIntake(t *testing.T) {
	part := keys.Partition{Family: keys.FamilyFlow, Index: 3}
	other := keys.Partition{Family: keys.FamilyFlow, Index: 4}
	eid := func(p keys.Partition) string {
		id, err := keys.ExecutionIDIn(p, keys.NewUUID())
		require.NoError(t, err)
		return id.String()
	}
	mine, mine2, foreign := eid(part), eid(part), eid(other)
	// FlowFabric's parser takes an upper-case uuid; ours does not.
	nonCanonical := "{fp:3}:" + "A0000000-0000-4000-8000-000000000001"
	backedOff := eid(part)
	const idx, idx2 = "ff:idx:{fp:3}:lease_expiry", "ff:idx:{fp:3}:other"
	cand := func(key, member string) scannerapi.Candidate {
		return scannerapi.Candidate{Source: "src", Key: key, Member: member}
	}
	execs := scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Remove: []keys.IDForm{keys.IDInvalid, keys.IDForeign}}

	for _, tc := range []struct {
		name    string
		intake  scanutil.Intake[keys.ExecutionID]
		dryRun  bool
		cands   []scannerapi.Candidate
		want    []scanutil.Verdict
		errors  map[string]int64 // "class/code"
		notes   []string
		skipped int64
	}{
		{
			name:   "canonical ids are taken once per scan",
			intake: execs,
			cands:  []scannerapi.Candidate{cand(idx, mine), cand(idx, mine2), cand(idx, mine), cand(idx2, mine)},
			want:   []scanutil.Verdict{scanutil.Take, scanutil.Take, scanutil.Duplicate, scanutil.Duplicate},
		},
		{
			name:   "per index, the same id in two indexes is taken twice",
			intake: scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, PerIndex: true},
			cands:  []scannerapi.Candidate{cand(idx, mine), cand(idx2, mine), cand(idx2, mine)},
			want:   []scanutil.Verdict{scanutil.Take, scanutil.Take, scanutil.Duplicate},
		},
		{
			name:   "garbage and foreign ids are removed, a non-canonical spelling left and noted",
			intake: execs,
			cands:  []scannerapi.Candidate{cand(idx, "garbage"), cand(idx, foreign), cand(idx, nonCanonical), cand(idx, "garbage")},
			want:   []scanutil.Verdict{scanutil.Remove, scanutil.Remove, scanutil.Leave, scanutil.Duplicate},
			errors: map[string]int64{"invalid/invalid_member": 1, "invalid/foreign_member": 1, "invalid/non_canonical_member": 1},
			notes:  []string{`left non-canonical member "` + nonCanonical + `" of ` + idx + ` in place`},
		},
		{
			name:   "each index entry of garbage is counted and removed, whatever the other indexes hold",
			intake: execs,
			cands:  []scannerapi.Candidate{cand(idx, "garbage"), cand(idx2, "garbage")},
			want:   []scanutil.Verdict{scanutil.Remove, scanutil.Remove},
			errors: map[string]int64{"invalid/invalid_member": 2},
		},
		{
			name:   "a dry run notes the removal and leaves the member",
			intake: execs,
			dryRun: true,
			cands:  []scannerapi.Candidate{cand(idx, "garbage"), cand(idx, mine)},
			want:   []scanutil.Verdict{scanutil.Leave, scanutil.Take},
			errors: map[string]int64{"invalid/invalid_member": 1},
			notes:  []string{`would remove invalid member "garbage" of ` + idx},
		},
		{
			name:   "forms not listed in Remove are left",
			intake: scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Remove: []keys.IDForm{keys.IDInvalid}},
			cands:  []scannerapi.Candidate{cand(idx, foreign)},
			want:   []scanutil.Verdict{scanutil.Leave},
			errors: map[string]int64{"invalid/foreign_member": 1},
			notes:  []string{`left foreign member "` + foreign + `" of ` + idx + ` in place`},
		},
		{
			name:   "ids of any partition, when the index is not the partition's own",
			intake: scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDs, Remove: []keys.IDForm{keys.IDInvalid}},
			cands:  []scannerapi.Candidate{cand(idx, foreign)},
			want:   []scanutil.Verdict{scanutil.Take},
		},
		{
			name:   "other sources are ignored",
			intake: scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Sources: []string{"a", "b"}},
			cands: []scannerapi.Candidate{{Source: "a", Key: idx, Member: mine}, {Source: "c", Key: idx, Member: "garbage"},
				{Source: "b", Key: idx2, Member: mine2}},
			want: []scanutil.Verdict{scanutil.Take, scanutil.OtherSource, scanutil.Take},
		},
		{
			name:    "a backed-off id is skipped and counted, once",
			intake:  execs,
			cands:   []scannerapi.Candidate{cand(idx, backedOff), cand(idx2, backedOff), cand(idx, mine)},
			want:    []scanutil.Verdict{scanutil.BackedOff, scanutil.Duplicate, scanutil.Take},
			skipped: 1,
		},
		{
			name:   "the noun names codes and notes",
			intake: scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Remove: []keys.IDForm{keys.IDInvalid}, Noun: "flow_id"},
			dryRun: true,
			cands:  []scannerapi.Candidate{cand(idx, "x")},
			want:   []scanutil.Verdict{scanutil.Leave},
			errors: map[string]int64{"invalid/invalid_flow_id": 1},
			notes:  []string{`would remove invalid flow id "x" of ` + idx},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failures := scannerapi.NewFailureTracker()
			for range scannerapi.DefaultFailureThreshold {
				failures.RecordFailure(backedOff, 7)
			}
			rules := tc.intake
			rules.Failures = failures
			req := &scannerapi.ScanRequest{Partition: part, Cycle: 8, DryRun: tc.dryRun}
			res := &scannerapi.ScanResult{}
			in := rules.Begin(context.Background(), req, res)
			var got []scanutil.Verdict
			for _, c := range tc.cands {
				id, v := in.Admit(c)
				got = append(got, v)
				if v == scanutil.Take || v == scanutil.BackedOff {
					assert.Equal(t, c.Member, id.String(), "the id is the member's")
				} else {
					assert.True(t, id.IsZero(), "no id for %s", v)
				}
			}
			assert.Equal(t, tc.want, got)
			errs := map[string]int64{}
			for _, e := range res.Errors {
				errs[string(e.Class)+"/"+e.Code] += e.Count
			}
			if tc.errors == nil {
				tc.errors = map[string]int64{}
			}
			assert.Equal(t, tc.errors, errs)
			assert.Equal(t, tc.notes, res.Notes)
			assert.Equal(t, tc.skipped, res.Skipped)
		})
	}
}

// The backoff key carries the prefix, so one tracker can hold two kinds of
// item.
func TestIntakeBackoffPrefix(t *testing.T) {
	part := keys.Partition{Family: keys.FamilyFlow, Index: 0}
	fid := keys.NewFlowID().String()
	failures := scannerapi.NewFailureTracker()
	for range scannerapi.DefaultFailureThreshold {
		failures.RecordFailure("flow:"+fid, 1)
	}
	req := &scannerapi.ScanRequest{Partition: part, Cycle: 2}
	for _, tc := range []struct {
		prefix string
		want   scanutil.Verdict
	}{{"flow:", scanutil.BackedOff}, {"", scanutil.Take}} {
		in := scanutil.Intake[keys.FlowID]{Parse: scanutil.FlowIDs, Failures: failures, BackoffPrefix: tc.prefix}.
			Begin(context.Background(), req, &scannerapi.ScanResult{})
		_, v := in.Admit(scannerapi.Candidate{Member: fid})
		assert.Equal(t, tc.want, v, "prefix %q", tc.prefix)
	}
}

// Claim takes an id the scanner admitted by its own rules: Admit then
// answers Duplicate for it, and Taken reports it.
func TestIntakeClaim(t *testing.T) {
	part := keys.Partition{Family: keys.FamilyBudget, Index: 1}
	bid := keys.NewBudgetID().String()
	in := scanutil.Intake[keys.BudgetID]{Parse: scanutil.BudgetIDs}.
		Begin(context.Background(), &scannerapi.ScanRequest{Partition: part}, &scannerapi.ScanResult{})
	c := scannerapi.Candidate{Key: "ff:idx:{b:1}:budget_resets", Member: bid}
	assert.False(t, in.Taken(c))
	assert.True(t, in.Claim(c))
	assert.False(t, in.Claim(c), "claimed once")
	assert.True(t, in.Taken(c))
	_, v := in.Admit(c)
	assert.Equal(t, scanutil.Duplicate, v)
}

// The parsers hand out the id of a canonical member only.
func TestIntakeParsers(t *testing.T) {
	var p keys.Partition
	q := keys.NewUUID().String()
	qid, form := scanutil.QuotaIDs(q, p)
	assert.Equal(t, keys.IDCanonical, form)
	assert.Equal(t, q, qid.String())
	qid, form = scanutil.QuotaIDs("{"+q+"}", p)
	assert.Equal(t, keys.IDNonCanonical, form)
	assert.Equal(t, keys.QuotaID{}, qid)
	_, form = scanutil.BudgetIDs("nope", p)
	assert.Equal(t, keys.IDInvalid, form)
	_, form = scanutil.FlowIDs(q, p)
	assert.Equal(t, keys.IDCanonical, form)
}

// The removals an intake keeps with RemoveWith: the ones it answered
// Remove, in order, plus those the scanner queued or retired, each once;
// a dry run keeps none and notes the retirement instead.
func TestIntakeRemovals(t *testing.T) {
	part := keys.Partition{Family: keys.FamilyFlow, Index: 3}
	const idx = "ff:idx:{fp:3}:lease_expiry"
	rules := scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn, Remove: []keys.IDForm{keys.IDInvalid}, RemoveWith: "ZREM"}
	for _, dry := range []bool{false, true} {
		req := &scannerapi.ScanRequest{Partition: part, DryRun: dry}
		res := &scannerapi.ScanResult{}
		in := rules.Begin(context.Background(), req, res)
		for _, m := range []string{"garbage", "{fp:3}:A0000000-0000-4000-8000-000000000001", "junk"} {
			in.Admit(scannerapi.Candidate{Key: idx, Member: m})
		}
		in.QueueRemoval("ff:idx:{fp:3}:other", "done")
		in.Retire(idx, "gone")

		var b scanutil.Batch
		in.QueueRemovals(&b)
		if dry {
			// QueueRemoval is the scanner's own decision, kept as asked;
			// the intake's and Retire's hold back in a dry run.
			assert.Equal(t, []scannerapi.Command{{"ZREM", "ff:idx:{fp:3}:other", "done"}}, b.Commands())
			assert.Contains(t, res.Notes, `would remove "gone" from `+idx)
		} else {
			assert.Equal(t, []scannerapi.Command{
				{"ZREM", idx, "garbage"}, {"ZREM", idx, "junk"},
				{"ZREM", "ff:idx:{fp:3}:other", "done"}, {"ZREM", idx, "gone"},
			}, b.Commands())
		}
		var again scanutil.Batch
		in.QueueRemovals(&again)
		assert.Zero(t, again.Len(), "queued removals are handed over once")
	}
	assert.Panics(t, func() {
		scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDsIn}.Begin(context.Background(),
			&scannerapi.ScanRequest{Partition: part}, &scannerapi.ScanResult{}).QueueRemoval(idx, "x")
	})
}
