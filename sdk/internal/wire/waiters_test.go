package wire

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWaiters(t *testing.T) {
	w := newWaiters[string]()
	a, err := w.add(1)
	require.NoError(t, err)
	b, err := w.add(2)
	require.NoError(t, err)

	w.deliver(2, "two")
	w.deliver(1, "one")
	assert.Equal(t, "one", <-a)
	assert.Equal(t, "two", <-b)

	c, err := w.add(3)
	require.NoError(t, err)
	w.forget(3)
	w.deliver(3, "late")  // dropped: nobody waits
	w.deliver(99, "none") // never asked for
	assert.Empty(t, c)

	first := errors.New("first")
	w.end(first)
	w.end(errors.New("second"))
	select {
	case <-w.ended():
	default:
		t.Fatal("not ended")
	}
	assert.Equal(t, first, w.reason())
	_, err = w.add(4)
	assert.Equal(t, first, err)
	w.deliver(4, "after the end") // no panic, nothing to deliver to
}
