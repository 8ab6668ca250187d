package shadow

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
)

// The log counts every held-back write, keeps the latest Keep newest
// first, and bounds what a plugin's text can make it hold.
func TestLogKeepsTheLatestBounded(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1000, 0))
	l := New(clk, 0)
	assert.Equal(t, Snapshot{ByCommand: map[string]uint64{}}, l.Snapshot(0))
	for i := range Keep + 5 {
		clk.Advance(time.Second)
		l.Record(Decision{Command: "FCALL ff_expire_lease", Keys: []string{fmt.Sprintf("ff:exec:{fp:0}:%d", i)}, Args: []string{"a", "b", "c"}})
	}
	l.Record(Decision{Command: "DEL", Keys: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}})
	s := l.Snapshot(3)
	assert.Equal(t, uint64(Keep+6), s.WouldAct)
	assert.Equal(t, map[string]uint64{"FCALL ff_expire_lease": Keep + 5, "DEL": 1}, s.ByCommand)
	require.Len(t, s.Latest, 3)
	assert.Equal(t, "DEL a b c d e f g h (+2 keys)", s.Latest[0].String())
	assert.Equal(t, fmt.Sprintf("FCALL ff_expire_lease ff:exec:{fp:0}:%d", Keep+4), s.Latest[1].String())
	assert.Equal(t, fmt.Sprintf("FCALL ff_expire_lease ff:exec:{fp:0}:%d", Keep+3), s.Latest[2].String())
	assert.Len(t, l.Snapshot(0).Latest, Keep)

	l.Record(Decision{Command: "FCALL x\nforged [ERROR] line", Keys: []string{strings.Repeat("k", 10_000)}, Args: []string{strings.Repeat("v\n", 5000)}})
	it := l.Snapshot(1).Latest[0]
	assert.NotContains(t, it.Command, "\n")
	assert.Less(t, len(it.Keys[0]), 400)
	require.Len(t, it.Values, 1)
	assert.NotContains(t, it.Values[0], "\n")
	assert.Less(t, len(it.Values[0]), 200)
	assert.Equal(t, 1, it.Args)
}

// A configured ring keeps that many, within MaxKeep.
func TestLogKeepsItsConfiguredSize(t *testing.T) {
	t.Parallel()
	l := New(nil, 3)
	for i := range 10 {
		l.Record(Decision{Command: "DEL", Keys: []string{fmt.Sprint(i)}})
	}
	s := l.Snapshot(0)
	assert.Equal(t, uint64(10), s.WouldAct)
	require.Len(t, s.Latest, 3)
	assert.Equal(t, "DEL 9", s.Latest[0].String())
	assert.Equal(t, MaxKeep, New(nil, 1<<30).keep)
	assert.Equal(t, Keep, NewLogs(nil, 0).For("x").keep)
}
