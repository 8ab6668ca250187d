package leaseexpiry

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestUnsureSetAgesOut: an id counts while it is younger than unsureTTL
// cycles, and only once; an id never answered again ages out, and a full
// set makes room by dropping the aged ones first.
func TestUnsureSetAgesOut(t *testing.T) {
	t.Parallel()
	var u unsureSet
	u.add("a", 10)
	assert.True(t, u.take("a", 11), "answered the next cycle")
	assert.False(t, u.take("a", 12), "taken once")

	u.add("b", 10)
	assert.True(t, u.take("b", 10+unsureTTL), "still fresh at the bound")
	u.add("c", 10)
	assert.False(t, u.take("c", 11+unsureTTL), "aged out")
	u.add("d", 10)
	assert.False(t, u.take("d", 9), "a cycle number that went backwards (a host restart) does not count")

	// Renewed by every cycle that stops at the migrated key again.
	u.add("e", 10)
	u.add("e", 10+unsureTTL)
	assert.True(t, u.take("e", 10+2*unsureTTL))

	// Full: the aged entries make room; fresh ones are kept.
	var full unsureSet
	for i := range unsureLimit {
		full.add(strconv.Itoa(i), uint64(i%2)) // half at cycle 0, half at 1
	}
	full.add("late", 1+unsureTTL) // cycle 0's entries are aged by now
	assert.True(t, full.take("late", 1+unsureTTL))
	assert.True(t, full.take("1", 1+unsureTTL), "a fresh entry was kept")
	assert.False(t, full.take("0", 1+unsureTTL), "an aged entry was dropped")
	assert.Len(t, full.ids, unsureLimit/2-1)

	// Full of fresh entries: a new id is not recorded.
	var fresh unsureSet
	for i := range unsureLimit {
		fresh.add(strconv.Itoa(i), 5)
	}
	fresh.add("more", 6)
	assert.False(t, fresh.take("more", 6))
	assert.Len(t, fresh.ids, unsureLimit)
}
