package scheduler

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
)

func flowPart(i uint16) keys.Partition { return keys.Partition{Family: keys.FamilyFlow, Index: i} }

func indexes(ps []keys.Partition) []uint16 {
	out := make([]uint16, len(ps))
	for i, p := range ps {
		out[i] = p.Index
	}
	return out
}

func TestWakeupsDueInOrder(t *testing.T) {
	t.Parallel()
	var w Wakeups
	t0 := time.Unix(1000, 0)
	_, ok := w.Next()
	require.False(t, ok)
	w.Set(flowPart(3), t0.Add(30*time.Millisecond))
	w.Set(flowPart(1), t0.Add(10*time.Millisecond))
	w.Set(flowPart(2), t0.Add(20*time.Millisecond))
	w.Set(flowPart(4), t0.Add(20*time.Millisecond))
	next, ok := w.Next()
	require.True(t, ok)
	require.Equal(t, t0.Add(10*time.Millisecond), next)
	require.Empty(t, w.Due(t0.Add(9*time.Millisecond)))
	// Equal instants come out in partition order; the bound is inclusive.
	require.Equal(t, []uint16{1, 2, 4}, indexes(w.Due(t0.Add(20*time.Millisecond))))
	require.Equal(t, 1, w.Len())
	require.Equal(t, []uint16{3}, indexes(w.Due(t0.Add(time.Hour))))
	require.Zero(t, w.Len())
}

// A partition holds one wake-up: the latest read's, whether it moved
// earlier or later.
func TestWakeupsOnePerPartitionLatestWins(t *testing.T) {
	t.Parallel()
	var w Wakeups
	t0 := time.Unix(1000, 0)
	w.Set(flowPart(7), t0.Add(time.Second))
	w.Set(flowPart(7), t0.Add(5*time.Second))
	require.Equal(t, 1, w.Len())
	at, ok := w.At(7)
	require.True(t, ok)
	require.Equal(t, t0.Add(5*time.Second), at)
	require.Empty(t, w.Due(t0.Add(2*time.Second)), "the later read replaced the earlier hint")
	w.Set(flowPart(7), t0.Add(time.Millisecond))
	require.Equal(t, []uint16{7}, indexes(w.Due(t0.Add(time.Millisecond))))
}

func TestWakeupsDropAndReset(t *testing.T) {
	t.Parallel()
	var w Wakeups
	t0 := time.Unix(1000, 0)
	for i := range uint16(10) {
		w.Set(flowPart(i), t0.Add(time.Duration(i)*time.Second))
	}
	w.Drop(0)
	w.Drop(5)
	w.Drop(42) // not scheduled: nothing happens
	require.Equal(t, 8, w.Len())
	require.Equal(t, []uint16{1, 2, 3, 4, 6}, indexes(w.Due(t0.Add(6*time.Second))))
	w.Reset()
	require.Zero(t, w.Len())
	_, ok := w.Next()
	require.False(t, ok)
	w.Set(flowPart(9), t0)
	require.Equal(t, []uint16{9}, indexes(w.Due(t0)))
}

// The heap stays consistent under any mix of sets, drops and pops: what
// comes out is every partition whose latest instant passed, in order.
func TestWakeupsRandomOperationsMatchAModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var w Wakeups
	model := map[uint16]time.Time{}
	t0 := time.Unix(1000, 0)
	now := t0
	for step := 0; step < 20000; step++ {
		p := uint16(rng.IntN(64))
		switch rng.IntN(4) {
		case 0, 1:
			at := now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			w.Set(flowPart(p), at)
			model[p] = at
		case 2:
			w.Drop(p)
			delete(model, p)
		case 3:
			now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
			got := w.Due(now)
			var want []uint16
			for q, at := range model {
				if !at.After(now) {
					want = append(want, q)
				}
			}
			for i, p := range got {
				if i > 0 {
					require.False(t, model[p.Index].Before(model[got[i-1].Index]), "step %d: out of order", step)
				}
			}
			for _, q := range want {
				delete(model, q)
			}
			gotIdx := indexes(got)
			sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
			sort.Slice(gotIdx, func(i, j int) bool { return gotIdx[i] < gotIdx[j] })
			require.Equal(t, want, nilIfEmpty(gotIdx), "step %d", step)
		}
		require.Equal(t, len(model), w.Len())
	}
}

func nilIfEmpty(s []uint16) []uint16 {
	if len(s) == 0 {
		return nil
	}
	return s
}
