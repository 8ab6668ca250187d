package config

import (
	"maps"
	"os"
	"path/filepath"
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

// Every scanner block of every shipped configuration takes a pin: the
// edited file loads, the scanner carries the pin, and nothing else of the
// configuration changed. (Blocks that end in a nested mapping such as
// options: were where a pin insert once broke the YAML.)
func TestWritePinEveryShippedBlock(t *testing.T) {
	files, err := filepath.Glob("../../configs/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	sha := strings.Repeat("c", 64)
	// Extra shapes beside the shipped ones: a block ending in a nested
	// block mapping, then another scanner; comments and blank lines inside.
	extra := filepath.Join(t.TempDir(), "shapes.yaml")
	require.NoError(t, os.WriteFile(extra, []byte("scanners:\n  a:\n    interval: 1s\n    options:\n      x: \"1\"\n      y: two\n\n  # b follows\n  b:\n    options:\n      z: \"3\"\n  c: {}\n"), 0o600))
	for _, f := range append(files, extra) {
		before, err := Load(Sources{File: f, Environ: []string{}})
		require.NoError(t, err, f)
		require.NotEmpty(t, before.Scanners, f)
		for name := range before.Scanners {
			out := filepath.Join(t.TempDir(), "pinned.yaml")
			body, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(out, body, 0o600))
			require.NoError(t, WritePin(out, name, sha), "%s: %s", f, name)
			after, err := Load(Sources{File: out, Environ: []string{}})
			require.NoError(t, err, "%s: %s", f, name)
			want := *before
			want.Scanners = maps.Clone(before.Scanners)
			sc := want.Scanners[name]
			sc.SHA256 = sha
			want.Scanners[name] = sc
			assert.Equal(t, &want, after, "%s: %s", f, name)
		}
	}
}
