package admintoken

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnsureCreatesAPrivateTokenOnceAndReadsItBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "admin-token")
	tok, created, err := Ensure(path)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Len(t, tok, 64)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	again, created, err := Ensure(path)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, tok, again, "a restart keeps the token the CLI already knows")
	read, err := Read(path)
	require.NoError(t, err)
	assert.Equal(t, tok, read)
}

func TestReadRefusesFilesOthersCanReach(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "t")
	_, _, err := Ensure(good)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(good, 0o640))
	_, err = Read(good)
	assert.ErrorContains(t, err, "others may read it")
	_, _, err = Ensure(good)
	assert.Error(t, err, "Ensure does not replace a file it refuses")

	require.NoError(t, os.Chmod(good, 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(good, link))
	_, err = Read(link)
	assert.ErrorContains(t, err, "not a regular file")

	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("abc\n"), 0o600))
	_, err = Read(short)
	assert.ErrorContains(t, err, "at least 32")
}

func TestEqual(t *testing.T) {
	assert.True(t, Equal("abc", "abc"))
	assert.False(t, Equal("abd", "abc"))
	assert.False(t, Equal("", ""), "no token configured matches nothing")
}

// Hosts starting at the same moment on one token path: every one gets
// the same complete token, exactly one created it, and nothing else is
// left in the directory. (Creating the name first and writing it after
// let a host read an empty token in between.)
func TestEnsureConcurrently(t *testing.T) {
	for round := 0; round < 200; round++ {
		dir := t.TempDir()
		path := filepath.Join(dir, "admin-token")
		const hosts = 8
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			tokens  [hosts]string
			created [hosts]bool
			errs    [hosts]error
		)
		for i := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tokens[i], created[i], errs[i] = Ensure(path)
			}()
		}
		close(start)
		wg.Wait()
		n := 0
		for i := range hosts {
			require.NoError(t, errs[i], "round %d", round)
			assert.Equal(t, tokens[0], tokens[i])
			if created[i] {
				n++
			}
		}
		assert.Equal(t, 1, n, "one host created the token")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, entries, 1, "only the token file is left")
	}
}
