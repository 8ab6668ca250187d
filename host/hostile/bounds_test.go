package hostile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// requireCgroups skips where this machine's host could not make control
// groups for its plugins (not root, no delegated subtree), saying why:
// the host then bounds plugins by rlimits, and status says so.
func requireCgroups(t *testing.T) {
	t.Helper()
	requireConfinement(t)
	cg, err := pluginhost.OpenCgroups(pluginhost.CgroupOptions{})
	if err != nil {
		t.Skipf("no control groups for plugins here: %v", err)
	}
	require.NoError(t, cg.Close())
}

// pluginCgroupFile is file in the control group of the plugin running
// under the host with pid hostPid (the plugin-N group under
// ffscan-<hostPid>-<n> that holds a process and has that file), or "".
func pluginCgroupFile(hostPid int, file string) string {
	var found string
	hostGroup := "ffscan-" + strconv.Itoa(hostPid) + "-"
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || found != "" {
			return nil
		}
		if !strings.HasPrefix(filepath.Base(filepath.Dir(p)), hostGroup) || !strings.HasPrefix(d.Name(), "plugin-") {
			return nil
		}
		procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if _, err := os.Stat(filepath.Join(p, file)); err == nil && strings.TrimSpace(string(procs)) != "" {
			found = filepath.Join(p, file)
		}
		return filepath.SkipDir
	})
	return found
}

// cgroupStat reads a "key value" file of a control group.
func cgroupStat(t *testing.T, path string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, line)
			out[k] = n
		}
	}
	return out
}

// cpuUsed is the group's CPU time in microseconds (cgroup v2's
// cpu.stat usage_usec, else v1's cpuacct.usage in nanoseconds).
func cpuUsed(t *testing.T, stat map[string]int64, hostPid int) int64 {
	t.Helper()
	if n, ok := stat["usage_usec"]; ok {
		return n
	}
	path := pluginCgroupFile(hostPid, "cpuacct.usage")
	require.NotEmpty(t, path, "the plugin's cpuacct group")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return ns / 1000
}

// A plugin spinning four goroutines stays at its CPU bound: over the
// periods the kernel counted, its group used at most the quota per
// period, and was throttled; the host still gets its calls answered.
// Before, nothing bounded a plugin's CPU: four spinning goroutines took
// every core of the machine the host runs on.
func TestPluginSpinningStaysAtItsCPUBound(t *testing.T) {
	requireCgroups(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	const cpus = 0.05
	h := startHost(t, srv.Addr, 16<<20, 2<<30, fmt.Sprintf("    cpu_limit: %g\n", cpus))
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the host runs the plugin")
	assert.Equal(t, "ok: spinning in 4 goroutines", attackThrough(t, c, "spin 4"))

	pid := h.cmd.Process.Pid
	statPath := pluginCgroupFile(pid, "cpu.stat")
	require.NotEmpty(t, statPath, "the plugin runs in a control group with the cpu controller")
	before := cgroupStat(t, statPath)
	usedBefore := cpuUsed(t, before, pid)
	// Thirty periods of 100 ms with the spinners runnable (the kernel
	// counts a period only when the group had work in it), and the group
	// throttled in some: the bound applied (a machine so busy that the
	// spinners never got 5 ms of CPU in a period takes longer to show it).
	var after map[string]int64
	require.Eventually(t, func() bool {
		after = cgroupStat(t, statPath)
		return after["nr_periods"]-before["nr_periods"] >= 30 && after["nr_throttled"] > before["nr_throttled"]
	}, 2*time.Minute, 50*time.Millisecond, "the spinning plugin was never throttled")
	used := cpuUsed(t, after, pid) - usedBefore
	periods := after["nr_periods"] - before["nr_periods"]
	quota := int64(cpus * 100_000)
	// The kernel lets a group run past its quota by at most what one
	// period's accounting slack allows: a tenth, and one period's quota.
	assert.LessOrEqual(t, used, periods*quota*11/10+quota, "%d us of CPU over %d periods of %d us quota", used, periods, quota)
	// Throttled, not stopped: the plugin still answers the host.
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"))
}

// A plugin that holds memory outside its Go heap (a 512 MiB file in its
// TMPDIR on a tmpfs, which RLIMIT_DATA does not count) dies at its
// control group's memory bound, alone: the host restarts it and says
// why. Before, only RLIMIT_DATA bounded a plugin, and the file's memory
// was the machine's.
func TestPluginMemoryInFilesIsBounded(t *testing.T) {
	requireCgroups(t)
	shm, err := os.MkdirTemp("/dev/shm", "ffscan-hostile-")
	if err != nil {
		t.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	srv := testserver.New(t)
	c := srv.Client(t)
	const limit = 128 << 20
	h := startHostEnv(t, "plain", srv.Addr, 16<<20, 2<<30, fmt.Sprintf("    memory_limit: %d\n", limit), []string{"TMPDIR=" + shm})
	if strings.Contains(h.log(), "noexec") {
		t.Skipf("/dev/shm is mounted noexec here")
	}
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the host runs the plugin")

	require.NoError(t, c.Do(t.Context(), c.B().Zadd().Key("ff:idx:{fp:0}:hostile").ScoreMember().ScoreMember(0, "fillmem 512").Build()).Error())
	// The dying plugin took its attack off before it wrote; the ping is
	// answered by the restarted plugin.
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the plugin was restarted")
	logs := h.log()
	assert.Contains(t, logs, "plugin failed; restarting")
	assert.Contains(t, logs, "the plugin passed its memory limit of 128 MiB (killed by the kernel at its control group's memory bound)")
}

// In a control group, a plugin's memory limit counts what it holds, not
// the address space it reserved: 24 more threads (192 MiB of stack
// reservations in a plugin built with cgo, whose C library reserves 8
// MiB per thread) run under a 128 MiB limit. Before, the host also set
// RLIMIT_DATA there, which counts those reservations in full: a plugin
// holding 44 MiB died when its runtime started a thread under load
// ("runtime/cgo: pthread_create failed: Resource temporarily
// unavailable", exit status 2, said to be nothing but that).
func TestPluginThreadsCountOnlyWhatTheyHold(t *testing.T) {
	requireCgroups(t)
	srv := testserver.New(t)
	c := srv.Client(t)
	h := startHost(t, srv.Addr, 16<<20, 2<<30, fmt.Sprintf("plugin_memory_limit: %d\n", 128<<20))
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the host runs the plugin")
	assert.Equal(t, "ok: holding 24 more threads", attackThrough(t, c, "threads 24"))
	assert.Equal(t, "ok: pong", attackThrough(t, c, "ping"), "the plugin still runs")
	assert.NotContains(t, h.log(), "plugin failed")
}
