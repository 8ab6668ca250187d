package scannerapi_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func TestFailureTrackerBacksOffAfterThreshold(t *testing.T) {
	ft := scannerapi.NewFailureTracker()
	assert.False(t, ft.RecordFailure("e", 100))
	assert.False(t, ft.RecordFailure("e", 101))
	assert.False(t, ft.ShouldSkip("e", 101), "two failures are not enough")
	assert.True(t, ft.RecordFailure("e", 102), "the third failure starts the backoff")
	for c := uint64(102); c < 112; c++ {
		assert.True(t, ft.ShouldSkip("e", c), "cycle %d", c)
	}
	assert.Equal(t, 1, ft.BackedOff(105))
	assert.False(t, ft.ShouldSkip("e", 112), "backoff over: fresh attempts")
	assert.Equal(t, 0, ft.Len())
	assert.False(t, ft.RecordFailure("e", 112))
	assert.False(t, ft.ShouldSkip("e", 113))
}

func TestFailureTrackerSuccessForgets(t *testing.T) {
	ft := scannerapi.NewFailureTracker()
	ft.RecordFailure("e", 1)
	ft.RecordFailure("e", 2)
	ft.RecordSuccess("e")
	ft.RecordFailure("e", 3)
	assert.False(t, ft.ShouldSkip("e", 3), "consecutive failures only")
}

// P16: the cycle comes from the host on every call, so backoffs expire
// whatever happens to any one partition.
func TestFailureTrackerCycleFromHost(t *testing.T) {
	ft := scannerapi.NewFailureTracker()
	for c := uint64(5); c < 8; c++ {
		ft.RecordFailure("e", c)
	}
	assert.True(t, ft.ShouldSkip("e", 8))
	assert.False(t, ft.ShouldSkip("e", 17))
	// A host that restarts counting from 0 does not stretch a backoff.
	for c := uint64(1000); c < 1003; c++ {
		ft.RecordFailure("x", c)
	}
	assert.False(t, ft.ShouldSkip("x", 0))
}

func TestFailureTrackerGCKeepsBackoffsAndRecentCounts(t *testing.T) {
	ft := &scannerapi.FailureTracker{GCSize: 10, GCEvery: 50}
	for i := 0; i < 20; i++ {
		ft.RecordFailure(fmt.Sprint("old", i), 1) // one failure, long ago
	}
	ft.RecordFailure("recent", 30)
	assert.Equal(t, 21, ft.Len())
	for c := uint64(55); c < 58; c++ { // the first call collects
		ft.RecordFailure("poison", c)
	}
	assert.Equal(t, 2, ft.Len(), "old partial counts dropped; the recent count kept")
	assert.True(t, ft.ShouldSkip("poison", 58))
	assert.False(t, ft.RecordFailure("recent", 59))
	assert.True(t, ft.RecordFailure("recent", 60), "the recent count survived the collection")
}

func TestFailureTrackerConcurrent(t *testing.T) {
	ft := scannerapi.NewFailureTracker()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for c := uint64(0); c < 200; c++ {
				k := fmt.Sprint("k", (int(c)+g)%17)
				if !ft.ShouldSkip(k, c) {
					if c%3 == 0 {
						ft.RecordSuccess(k)
					} else {
						ft.RecordFailure(k, c)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	assert.LessOrEqual(t, ft.Len(), 17)
}

// Transport failures (no reply, or the cluster declining for a moment)
// never back an item off, however many there are; other classes do.
func TestFailureTrackerIgnoresTransport(t *testing.T) {
	ft := scannerapi.NewFailureTracker()
	for c := uint64(1); c <= 10; c++ {
		assert.False(t, ft.RecordFailureClass("e", c, scannerapi.ErrTransport))
		assert.False(t, ft.ShouldSkip("e", c))
	}
	assert.Equal(t, 0, ft.Len(), "nothing counted")
	assert.False(t, ft.RecordFailureClass("e", 11, scannerapi.ErrServer))
	assert.False(t, ft.RecordFailureClass("e", 12, scannerapi.ErrLua))
	assert.True(t, ft.RecordFailureClass("e", 13, scannerapi.ErrServer), "the third item failure backs off")
}
