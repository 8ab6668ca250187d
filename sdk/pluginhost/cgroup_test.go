package pluginhost_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/pluginhost"
)

// openCgroups opens the plugins' control groups, or skips saying why
// this machine offers none (not root and no delegated subtree, say).
func openCgroups(t *testing.T) *pluginhost.Cgroups {
	t.Helper()
	cg, err := pluginhost.OpenCgroups(pluginhost.CgroupOptions{})
	if err != nil {
		t.Skipf("no control groups for plugins here: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, cg.Close()) })
	return cg
}

// hostGroupDir is the host's group as Kind names it ("cgroup vN at DIR").
func hostGroupDir(t *testing.T, cg *pluginhost.Cgroups) string {
	t.Helper()
	_, dir, ok := strings.Cut(cg.Kind(), " at ")
	require.True(t, ok, cg.Kind())
	require.True(t, strings.HasPrefix(filepath.Base(dir), "ffscan-"+strconv.Itoa(os.Getpid())+"-"), dir)
	return dir
}

// A plugin launched with control groups runs in a group of its own,
// bounded as asked (the kernel's files say so), reports its usage, and
// its group is gone once it exited; closing the host's group leaves no
// directory behind.
func TestPluginRunsInItsOwnBoundedGroup(t *testing.T) {
	for _, iso := range []pluginhost.Isolation{pluginhost.IsolationOff, pluginhost.IsolationAuto} {
		t.Run(map[pluginhost.Isolation]string{pluginhost.IsolationOff: "unconfined", pluginhost.IsolationAuto: "confined"}[iso], func(t *testing.T) {
			cg := openCgroups(t)
			dir := hostGroupDir(t, cg)
			const memory = 256 << 20
			p := launchWith(t, pluginhost.LaunchConfig{Callbacks: &echoCallbacks{}, Isolation: iso, Cgroups: cg,
				MemoryLimit: memory, CPULimit: 0.5, PidsLimit: 100})
			assert.Contains(t, p.Bounds(), "memory at most 256 MiB (everything it maps, files in memory included), CPU at most 0.5 (quota 50000 us per 100000 us), at most 100 tasks")

			groups, err := filepath.Glob(filepath.Join(dir, "plugin-*"))
			require.NoError(t, err)
			require.Len(t, groups, 1)
			procs, err := os.ReadFile(filepath.Join(groups[0], "cgroup.procs"))
			require.NoError(t, err)
			assert.Equal(t, strconv.Itoa(p.Pid()), strings.TrimSpace(string(procs)), "the plugin, and nothing else, runs in the group")
			if strings.HasPrefix(cg.Kind(), "cgroup v1") {
				assert.Equal(t, strconv.Itoa(memory), readTrim(t, filepath.Join(groups[0], "memory.limit_in_bytes")))
				assert.Equal(t, "50000", readTrim(t, filepath.Join(v1Group(t, p.Pid(), "cpu"), "cpu.cfs_quota_us")))
				assert.Equal(t, "100", readTrim(t, filepath.Join(v1Group(t, p.Pid(), "pids"), "pids.max")))
			} else {
				assert.Equal(t, strconv.Itoa(memory), readTrim(t, filepath.Join(groups[0], "memory.max")))
				assert.Equal(t, "50000 100000", readTrim(t, filepath.Join(groups[0], "cpu.max")))
				assert.Equal(t, "100", readTrim(t, filepath.Join(groups[0], "pids.max")))
			}

			u, ok := p.Usage()
			require.True(t, ok)
			assert.Positive(t, u.MemoryBytes)
			assert.Positive(t, u.CPUSeconds)
			assert.Positive(t, u.Pids)
			assert.Zero(t, u.OOMKills)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, p.Close(ctx))
			<-p.Exited()
			_, ok = p.Usage()
			assert.False(t, ok, "no usage once the plugin exited")
			_, err = os.Stat(groups[0])
			assert.ErrorIs(t, err, os.ErrNotExist, "the plugin's group is removed once it exited")
		})
	}
}

// Without control groups, Bounds says what applies instead.
func TestBoundsWithoutCgroups(t *testing.T) {
	p := launchWith(t, pluginhost.LaunchConfig{Callbacks: &echoCallbacks{}, MemoryLimit: 256 << 20, CPULimit: 0.5})
	assert.Equal(t, "rlimits: memory at most 256 MiB (RLIMIT_DATA, private mappings only); no CPU or task bound (no control group)", p.Bounds())
	_, ok := p.Usage()
	assert.False(t, ok)
}

// A host that died leaves its group behind; the next host to open the
// same parent removes it.
func TestDeadHostsGroupsAreRemoved(t *testing.T) {
	cg := openCgroups(t)
	parent := filepath.Dir(hostGroupDir(t, cg))
	require.NoError(t, cg.Close())
	// A pid that is not running: past the kernel's pid_max.
	stale := filepath.Join(parent, "ffscan-99999999-1")
	require.NoError(t, os.Mkdir(stale, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(stale, "plugin-1"), 0o755))
	cg2 := openCgroups(t)
	_, err := os.Stat(stale)
	assert.ErrorIs(t, err, os.ErrNotExist, "the dead host's group is removed")
	require.NoError(t, cg2.Close())
	_, err = os.Stat(hostGroupDir(t, cg2))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// v1Group is process pid's group in the v1 hierarchy of controller
// (mounted at /sys/fs/cgroup/<controller>, as systemd and Docker do).
func v1Group(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == controller {
			return filepath.Join("/sys/fs/cgroup", controller, parts[2])
		}
	}
	t.Fatalf("process %d is in no %s group: %s", pid, controller, b)
	return ""
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}
