package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const body = "#!/bin/sh\nexit 0\n"

func setup(t *testing.T) (*Catalog, string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	p := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	c, err := New(dir)
	require.NoError(t, err)
	return c, dir
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestVerifyGood(t *testing.T) {
	c, dir := setup(t)
	e, err := c.Verify("good", "")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "good"), e.Path)
	assert.Equal(t, sum(body), e.SHA256)
	_, err = c.Verify("good", sum(body))
	require.NoError(t, err, "a matching pin passes")
}

func TestSymlinkRefused(t *testing.T) {
	c, dir := setup(t)
	require.NoError(t, os.Symlink(filepath.Join(dir, "good"), filepath.Join(dir, "link")))
	_, err := c.Verify("link", "")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrSymlink))
	assert.Contains(t, err.Error(), "symlink")
	names, err := c.List()
	require.NoError(t, err)
	assert.Contains(t, names, "link", "listed so that verify can name it")
}

func TestWorldWritableRefused(t *testing.T) {
	c, dir := setup(t)
	p := filepath.Join(dir, "ww")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	require.NoError(t, os.Chmod(p, 0o757))
	_, err := c.Verify("ww", "")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrWorldWritable))
	assert.Contains(t, err.Error(), "world-writable")
}

func TestGroupWritableRefused(t *testing.T) {
	c, dir := setup(t)
	p := filepath.Join(dir, "gw")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	require.NoError(t, os.Chmod(p, 0o775))
	_, err := c.Verify("gw", "")
	require.ErrorIs(t, err, ErrGroupWritable)
	assert.Contains(t, err.Error(), "chmod g-w")

	require.NoError(t, os.Chmod(dir, 0o775))
	_, err = c.Verify("good", "")
	require.ErrorIs(t, err, ErrGroupWritable)
	assert.Contains(t, err.Error(), "plugin_dir")
}

func TestWorldWritableDirRefused(t *testing.T) {
	c, dir := setup(t)
	require.NoError(t, os.Chmod(dir, 0o777))
	_, err := c.Verify("good", "")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrWorldWritable))
	assert.Contains(t, err.Error(), "plugin_dir")
}

func TestHashMismatchRefused(t *testing.T) {
	c, _ := setup(t)
	pin := sum("something else")
	_, err := c.Verify("good", pin)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrHashMismatch))
	assert.Contains(t, err.Error(), "sha256 is "+sum(body))
	assert.Contains(t, err.Error(), "pin is "+pin)
}

func TestNotFoundAndNotExecutable(t *testing.T) {
	c, dir := setup(t)
	_, err := c.Verify("missing", "")
	assert.True(t, errors.Is(err, ErrNotFound))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644))
	_, err = c.Verify("data", "")
	assert.True(t, errors.Is(err, ErrNotExecutable))
	_, err = c.Verify("../etc/passwd", "")
	assert.Error(t, err)
	names, err := c.List()
	require.NoError(t, err)
	assert.Equal(t, []string{"good"}, names)
}

// A configuration naming a plugin by its old name is told the new one.
func TestRenamedPluginNamesItsNewName(t *testing.T) {
	c, _ := setup(t)
	_, err := c.Verify("retentiontrimmer", "")
	require.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), `ffscan's plugin retentiontrimmer is now named retention; name "retention" in the scanner's plugin setting`)
	_, err = c.Stage("dependencyreconciler", "")
	require.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), "now named depreconciler")
}

// A plugin or plugin directory owned by another user (neither this one
// nor root) is refused: that user could replace the code.
func TestForeignOwnerRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	c, dir := setup(t)
	p := filepath.Join(dir, "theirs")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	require.NoError(t, os.Chown(p, 65534, 65534))
	_, err := c.Verify("theirs", "")
	require.ErrorIs(t, err, ErrForeignOwner)
	assert.Contains(t, err.Error(), "uid 65534")

	require.NoError(t, os.Chown(dir, 65534, 65534))
	_, err = c.Verify("good", "")
	require.ErrorIs(t, err, ErrForeignOwner)
	assert.Contains(t, err.Error(), "plugin_dir")
}
