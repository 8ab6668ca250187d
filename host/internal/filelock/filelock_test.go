package filelock

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Holders of one lock take turns: a counter kept in a file, read and
// written back by many holders at once, loses no increment.
func TestHoldersOfOneLockTakeTurns(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "counter")
	require.NoError(t, os.WriteFile(counter, []byte("0"), 0o600))
	for name, lock := range map[string]func() (func(), error){
		"file": func() (func(), error) { return File(filepath.Join(dir, "counter.lock")) },
		"dir":  func() (func(), error) { return Dir(dir) },
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(counter, []byte("0"), 0o600))
			const holders, each = 8, 25
			var wg sync.WaitGroup
			errs := make(chan error, holders*each)
			for range holders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						errs <- increment(lock, counter)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			b, err := os.ReadFile(counter)
			require.NoError(t, err)
			assert.Equal(t, strconv.Itoa(holders*each), string(b))
		})
	}
}

func increment(lock func() (func(), error), path string) error {
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return err
	}
	// Replaced by rename, as the lock file of an install is: a lock on
	// the directory holds across it.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(n+1)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func TestFileIsCreatedPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := File(path)
	require.NoError(t, err)
	unlock()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestMissingDirIsAnError(t *testing.T) {
	_, err := Dir(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
