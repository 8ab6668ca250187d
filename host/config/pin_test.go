package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSetPin(t *testing.T) {
	sha := strings.Repeat("a", 64)
	for _, tc := range []struct{ in, out, err string }{
		{"scanners:\n  x:\n    batch: 5\n", "scanners:\n  x:\n    sha256: \"" + sha + "\"\n    batch: 5\n", ""},
		{"scanners:\n    x:\n        sha256: \"old\"\n        batch: 5\n", "scanners:\n    x:\n        sha256: \"" + sha + "\"\n        batch: 5\n", ""},
		{"scanners:\n  x: {}\n", "scanners:\n  x: {sha256: \"" + sha + "\"}\n", ""},
		{"scanners:\n  x: {sha256: old, batch: 5}\n", "scanners:\n  x: {sha256: \"" + sha + "\", batch: 5}\n", ""},
		{"scanners:\n  x:\n", "scanners:\n  x:\n    sha256: \"" + sha + "\"\n", ""},
		{"scanners:\n  y: {}\n", "", "scanners.x is not in the file"},
		{"scanners: {x: {}}\n", "", "no block-style scanners: section"},
	} {
		got, err := setPin([]byte(tc.in), "x", sha)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.out, string(got), tc.in)
	}
}
