//go:build linux

package pluginhost

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Where the groups go. cgroup v2 (one unified hierarchy): a group may
// hold processes or enable controllers for its children, not both
// (except the root), so the plugins' groups cannot be children of the
// host's own group; they go under a delegated parent that holds no
// process: CgroupOptions.Parent, or else the parent of the host's own
// group when that holds no process itself and this user may write it
// (systemd's Delegate=yes with DelegateSubgroup= puts a service there).
// cgroup v1 (a hierarchy per controller) has no such rule: the plugins'
// groups go under the host's own group in each hierarchy. Either way the
// host makes a group of its own there, ffscan-<pid>-<n>, holding one
// group per plugin process, plugin-<n>; a group left behind by a host that
// died is removed by the next host that opens the same parent.

// cgroupControllers are the controllers the bounds use, by hierarchy
// version; v1's cpuacct reports the CPU time (v2's cpu does).
var (
	cgroupV2Controllers = []string{"memory", "cpu", "pids"}
	cgroupV1Controllers = []string{"memory", "cpu", "cpuacct", "pids"}
)

// CgroupOptions say where OpenCgroups makes its groups.
type CgroupOptions struct {
	// Parent is a cgroup v2 directory delegated to the host (it holds no
	// process, and this user may write it); empty: found as described
	// above.
	Parent string
}

// Cgroups is a host's group for its plugins' groups (Launch makes one
// per plugin process). Safe for concurrent use.
type Cgroups struct {
	v2   bool
	root map[string]string // controller -> the host's ffscan-<pid> directory
	kind string
	seq  atomic.Uint64
}

// OpenCgroups makes the host's group for its plugins. It fails, saying
// why, where this host cannot make groups with the memory and CPU
// controllers (the caller then bounds plugins by rlimits and says so).
func OpenCgroups(opts CgroupOptions) (*Cgroups, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	if mnt, ok := mounts[""]; ok && (opts.Parent != "" || v2HasControllers(mnt, own[""])) {
		return openV2(mnt, own[""], opts.Parent)
	}
	if opts.Parent != "" {
		return nil, fmt.Errorf("cgroup parent %s: this host has no cgroup v2 hierarchy with the memory, cpu and pids controllers", opts.Parent)
	}
	return openV1(mounts, own)
}

// cgroupMounts are the mounted hierarchies: "" for the unified (v2) one,
// else each v1 controller's, as the directory of its root in this
// mount namespace.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 || fields[3] != "/" {
			// A mount of a subtree (a container's view) is not used:
			// the group paths in /proc/self/cgroup are from the root.
			continue
		}
		switch tail[0] {
		case "cgroup2":
			out[""] = fields[4]
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if slices.Contains(cgroupV1Controllers, opt) {
					out[opt] = fields[4]
				}
			}
		}
	}
	return out, sc.Err()
}

// ownCgroups are this process's groups: "" for v2, else by controller.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

func v2HasControllers(mnt, own string) bool {
	if own == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(mnt, own, "cgroup.controllers"))
	if err != nil {
		return false
	}
	have := strings.Fields(string(b))
	for _, c := range cgroupV2Controllers {
		if !slices.Contains(have, c) {
			return false
		}
	}
	return true
}

func openV2(mnt, own, parent string) (*Cgroups, error) {
	if parent == "" {
		if own == "" || own == "/" {
			parent = mnt
		} else {
			parent = filepath.Join(mnt, filepath.Dir(own))
			if procs, err := os.ReadFile(filepath.Join(parent, "cgroup.procs")); err != nil || strings.TrimSpace(string(procs)) != "" {
				return nil, fmt.Errorf("cgroup v2: the host's group %s is not in a delegated subtree (its parent %s holds processes or cannot be read); run the host in a subgroup of a delegated group (systemd: Delegate=yes, DelegateSubgroup=host) or name one in plugin_cgroup_parent", own, parent)
			}
		}
	}
	if err := enableControllers(parent); err != nil {
		return nil, err
	}
	dir, err := makeHostGroup(parent, hostGroupName())
	if err != nil {
		return nil, err
	}
	if err := enableControllers(dir); err != nil {
		_ = os.Remove(dir)
		return nil, err
	}
	return &Cgroups{v2: true, root: map[string]string{"": dir}, kind: "cgroup v2 at " + dir}, nil
}

// enableControllers makes the bounds' controllers available to dir's
// children.
func enableControllers(dir string) error {
	var add []string
	for _, c := range cgroupV2Controllers {
		add = append(add, "+"+c)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0); err != nil {
		return fmt.Errorf("cgroup v2: enable %s for the children of %s: %w", strings.Join(cgroupV2Controllers, ", "), dir, err)
	}
	return nil
}

func openV1(mounts, own map[string]string) (*Cgroups, error) {
	cg := &Cgroups{root: map[string]string{}}
	name := hostGroupName()
	var missing []string
	for _, c := range cgroupV1Controllers {
		mnt, ok := mounts[c]
		if !ok || own[c] == "" {
			missing = append(missing, c)
			continue
		}
		parent := filepath.Join(mnt, own[c])
		if slices.Contains(slices.Collect(maps.Values(cg.root)), filepath.Join(parent, name)) {
			// A hierarchy of several controllers (cpu,cpuacct): made.
			cg.root[c] = filepath.Join(parent, name)
			continue
		}
		dir, err := makeHostGroup(parent, name)
		if err != nil {
			cg.Close()
			return nil, err
		}
		cg.root[c] = dir
	}
	if len(missing) > 0 {
		cg.Close()
		return nil, fmt.Errorf("cgroups: no cgroup v2 hierarchy with the memory, cpu and pids controllers, and no v1 hierarchy for %s", strings.Join(missing, ", "))
	}
	cg.kind = "cgroup v1 at " + cg.root["memory"]
	return cg, nil
}

// hostGroups numbers the hosts of this process (tests run several): each
// has a group of its own, ffscan-<pid>-<n>.
var hostGroups atomic.Uint64

// makeHostGroup removes what dead hosts left in parent and makes this
// host's group there (name: the same for every hierarchy of one
// Cgroups).
func makeHostGroup(parent, name string) (string, error) {
	removeStaleGroups(parent)
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroups: make %s: %w", dir, err)
	}
	return dir, nil
}

// hostGroupName is a new name for a host's group.
func hostGroupName() string {
	return fmt.Sprintf("ffscan-%d-%d", os.Getpid(), hostGroups.Add(1))
}

// removeStaleGroups removes the groups of hosts that no longer run
// (ffscan-<pid> whose pid is gone), and their plugins' empty groups.
func removeStaleGroups(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "ffscan-")
		pid, _, _ := strings.Cut(rest, "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || !e.IsDir() || n == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		removeGroupTree(filepath.Join(parent, e.Name()))
	}
}

// removeGroupTree removes dir and the groups below it; a group that
// still holds a task stays (and so do its parents).
func removeGroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeGroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// Kind says which control groups bound the plugins, and where.
func (c *Cgroups) Kind() string { return c.kind }

// Close removes the host's group (its plugins' groups are removed as
// their processes end).
func (c *Cgroups) Close() error {
	var errs []error
	for _, dir := range c.root {
		removeGroupTree(dir)
		if _, err := os.Stat(dir); err == nil {
			errs = append(errs, fmt.Errorf("cgroups: %s still holds a process", dir))
		}
	}
	return errors.Join(errs...)
}

// cgroup is one plugin process's group (a directory per hierarchy).
type cgroup struct {
	v2     bool
	dirs   map[string]string // controller ("" for v2) -> directory
	limits Limits
}

// newGroup makes a group bounded by limits.
func (c *Cgroups) newGroup(limits Limits) (*cgroup, error) {
	name := "plugin-" + strconv.FormatUint(c.seq.Add(1), 10)
	g := &cgroup{v2: c.v2, dirs: map[string]string{}, limits: limits}
	for ctl, root := range c.root {
		dir := filepath.Join(root, name)
		// v1 may mount several controllers as one hierarchy (cpu and
		// cpuacct, often): one directory serves them all.
		if !slices.Contains(slices.Collect(maps.Values(g.dirs)), dir) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				g.remove()
				return nil, fmt.Errorf("cgroups: make %s: %w", dir, err)
			}
		}
		g.dirs[ctl] = dir
	}
	if err := g.bound(); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// bound writes the limits into the group's files.
func (g *cgroup) bound() error {
	l := g.limits
	type setting struct{ ctl, file, value string }
	var set []setting
	if g.v2 {
		if l.Memory > 0 {
			set = append(set, setting{"", "memory.max", strconv.FormatInt(l.Memory, 10)}, setting{"", "memory.swap.max", "0"})
		}
		if l.CPU > 0 {
			set = append(set, setting{"", "cpu.max", fmt.Sprintf("%d %d", cpuQuotaMicros(l.CPU), cpuPeriodMicros)})
		}
		if l.Pids > 0 {
			set = append(set, setting{"", "pids.max", strconv.FormatInt(l.Pids, 10)})
		}
	} else {
		if l.Memory > 0 {
			set = append(set, setting{"memory", "memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)},
				setting{"memory", "memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10)})
		}
		if l.CPU > 0 {
			set = append(set, setting{"cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriodMicros)},
				setting{"cpu", "cpu.cfs_quota_us", strconv.FormatInt(cpuQuotaMicros(l.CPU), 10)})
		}
		if l.Pids > 0 {
			set = append(set, setting{"pids", "pids.max", strconv.FormatInt(l.Pids, 10)})
		}
	}
	for _, s := range set {
		path := filepath.Join(g.dirs[s.ctl], s.file)
		err := os.WriteFile(path, []byte(s.value), 0)
		if err != nil && (s.file == "memory.swap.max" || s.file == "memory.memsw.limit_in_bytes") && errors.Is(err, fs.ErrNotExist) {
			// No swap accounting: no swap to escape to either.
			continue
		}
		if err != nil {
			return fmt.Errorf("cgroups: set %s to %s: %w", path, s.value, err)
		}
	}
	return nil
}

// procsFiles are the files a process writes its pid to to join the
// group (every hierarchy's).
func (g *cgroup) procsFiles() []string {
	var out []string
	for _, dir := range g.dirs {
		f := filepath.Join(dir, "cgroup.procs")
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// joinCgroups moves process pid into the groups whose cgroup.procs files
// are named.
func joinCgroups(files []string, pid int) error {
	for _, f := range files {
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join %s: %w", filepath.Dir(f), err)
		}
	}
	return nil
}

// usage reads the group's counters; a counter that cannot be read stays
// zero.
func (g *cgroup) usage() Usage {
	var u Usage
	if g.v2 {
		dir := g.dirs[""]
		u.MemoryBytes = readInt(filepath.Join(dir, "memory.current"))
		stat := readKeyed(filepath.Join(dir, "cpu.stat"))
		u.CPUSeconds = float64(stat["usage_usec"]) / 1e6
		u.ThrottledSeconds = float64(stat["throttled_usec"]) / 1e6
		u.Throttled = stat["nr_throttled"]
		u.Pids = readInt(filepath.Join(dir, "pids.current"))
		u.OOMKills = readKeyed(filepath.Join(dir, "memory.events"))["oom_kill"]
		return u
	}
	u.MemoryBytes = readInt(filepath.Join(g.dirs["memory"], "memory.usage_in_bytes"))
	u.CPUSeconds = float64(readInt(filepath.Join(g.dirs["cpuacct"], "cpuacct.usage"))) / 1e9
	stat := readKeyed(filepath.Join(g.dirs["cpu"], "cpu.stat"))
	u.ThrottledSeconds = float64(stat["throttled_time"]) / 1e9
	u.Throttled = stat["nr_throttled"]
	u.Pids = readInt(filepath.Join(g.dirs["pids"], "pids.current"))
	u.OOMKills = readKeyed(filepath.Join(g.dirs["memory"], "memory.oom_control"))["oom_kill"]
	return u
}

// remove removes the group's directories (each once it holds no task:
// after the plugin's process was waited for).
func (g *cgroup) remove() {
	for _, dir := range g.dirs {
		_ = os.Remove(dir)
	}
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// readKeyed reads a file of "key value" lines.
func readKeyed(path string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err == nil {
			out[k] = n
		}
	}
	return out
}
