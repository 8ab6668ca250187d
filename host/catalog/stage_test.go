package catalog

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stage hands out a private copy of exactly the bytes it checked; what
// happens to the file in plugin_dir afterwards does not reach it.
func TestStageCopiesWhatItChecked(t *testing.T) {
	c, dir := setup(t)
	t.Cleanup(func() { _ = c.Close() })
	e, err := c.Stage("good", sum(body))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "good"), e.Path, "status shows the plugin_dir file")
	assert.Equal(t, sum(body), e.SHA256)
	require.NotEqual(t, e.Path, e.ExecPath)
	st, err := os.Stat(filepath.Dir(e.ExecPath))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "the copies' directory is private")
	got, err := os.ReadFile(e.ExecPath)
	require.NoError(t, err)
	assert.Equal(t, body, string(got))

	// The original changes in place: the copy does not.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "good"), []byte("#!/bin/sh\necho evil\n"), 0o755))
	got, err = os.ReadFile(e.ExecPath)
	require.NoError(t, err)
	assert.Equal(t, body, string(got))

	// A pin mismatch stages nothing new.
	_, err = c.Stage("good", sum(body))
	require.ErrorIs(t, err, ErrHashMismatch)
	ents, err := os.ReadDir(filepath.Dir(e.ExecPath))
	require.NoError(t, err)
	assert.Len(t, ents, 1)

	require.NoError(t, c.Close())
	_, err = os.Stat(filepath.Dir(e.ExecPath))
	assert.True(t, errors.Is(err, os.ErrNotExist), "Close removes the copies")
}

// Swapping the file in a loop while pinned launches are staged (the race
// a hash-then-exec-the-path launch loses): every staged copy is the
// pinned one; the swapped-in file only ever fails the pin.
func TestStageCannotBeRaced(t *testing.T) {
	c, dir := setup(t)
	t.Cleanup(func() { _ = c.Close() })
	const evil = "#!/bin/sh\necho evil\n"
	path := filepath.Join(dir, "good")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b := body
			if i%2 == 1 {
				b = evil
			}
			tmp := filepath.Join(dir, ".swap")
			if os.WriteFile(tmp, []byte(b), 0o755) == nil {
				_ = os.Rename(tmp, path)
			}
		}
	}()
	staged, refused := 0, 0
	for range 300 {
		e, err := c.Stage("good", sum(body))
		if err != nil {
			require.True(t, errors.Is(err, ErrHashMismatch) || errors.Is(err, ErrNotExecutable), "%v", err)
			refused++
			continue
		}
		staged++
		got, err := os.ReadFile(e.ExecPath)
		require.NoError(t, err)
		require.Equal(t, body, string(got), "a staged copy is always the pinned binary")
	}
	close(stop)
	wg.Wait()
	t.Logf("%d staged, %d refused by the pin", staged, refused)
}

// Copies left by a process that is gone (a host killed with SIGKILL) are
// swept when a catalog next stages; a live process's are left alone.
func TestStaleStagingIsSwept(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	// A pid that is not running: a child that has exited and been reaped.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	dead := filepath.Join(tmp, fmt.Sprintf("%s%d-123", stagePrefix, cmd.Process.Pid))
	live := filepath.Join(tmp, fmt.Sprintf("%s%d-456", stagePrefix, os.Getppid()))
	for _, d := range []string{dead, live} {
		require.NoError(t, os.Mkdir(d, 0o700))
	}
	c, _ := setup(t)
	_, err := c.Stage("good", "")
	require.NoError(t, err)
	_, err = os.Stat(dead)
	assert.True(t, errors.Is(err, os.ErrNotExist), "the dead process's copies are gone")
	_, err = os.Stat(live)
	assert.NoError(t, err, "a live process's copies stay")
	require.NoError(t, c.Close())
}
