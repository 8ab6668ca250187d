package pluginhost

import (
	"fmt"
	"strings"
)

// Kernel resource bounds for plugin processes: each plugin in a control
// group of its own, with a memory bound that counts everything the
// process holds (page cache, tmpfs files and shared memory included,
// which RLIMIT_DATA does not), a CPU quota (a spinning plugin is
// throttled, not the host) and a bound on its tasks. A host that can
// create control groups opens Cgroups once and passes it to every
// Launch; elsewhere a plugin gets RLIMIT_DATA alone, and Plugin.Bounds
// says so.

// Limits are one plugin's kernel resource bounds; zero fields bound
// nothing.
type Limits struct {
	// Memory in bytes: memory.max (cgroup v2) or memory.limit_in_bytes
	// (v1); RLIMIT_DATA where there is no control group.
	Memory int64
	// CPU in CPUs (0.5: half of one): cpu.max (v2) or cpu.cfs_quota_us
	// (v1), over a 100 ms period.
	CPU float64
	// Pids bounds the process's tasks (threads included): pids.max.
	Pids int64
}

// cpuPeriodMicros is the CFS period the CPU quota is spread over: the
// kernel's default, short enough that a throttled plugin still answers
// health checks within a period.
const cpuPeriodMicros = 100000

// cpuQuotaMicros is the quota per period for cpus CPUs (at least the
// kernel's minimum, 1 ms).
func cpuQuotaMicros(cpus float64) int64 {
	q := int64(cpus * cpuPeriodMicros)
	if q < 1000 {
		q = 1000
	}
	return q
}

// Usage is what a plugin's control group reports, read when asked.
type Usage struct {
	// MemoryBytes is the memory charged to the group now.
	MemoryBytes int64
	// CPUSeconds is the CPU time the group used since it was made;
	// ThrottledSeconds the time its tasks waited for quota, in
	// Throttled periods.
	CPUSeconds       float64
	ThrottledSeconds float64
	Throttled        int64
	// Pids is the number of tasks in the group now.
	Pids int64
	// OOMKills counts the group's tasks the kernel killed at its memory
	// bound.
	OOMKills int64
}

// DescribeBounds says what bounds a plugin launched with Cgroups c (nil:
// none) and limits l: what Plugin.Bounds will say.
func DescribeBounds(c *Cgroups, l Limits) string {
	if c == nil {
		return describeLimits("", Limits{Memory: l.Memory})
	}
	return describeLimits(c.Kind(), l)
}

// describeLimits says what a plugin is bounded by, for Plugin.Bounds.
// kind names the mechanism ("cgroup v1 at ...", or "" where there are
// no control groups).
func describeLimits(kind string, l Limits) string {
	if kind == "" {
		if l.Memory > 0 {
			return memoryDesc(l.Memory) + "; no CPU or task bound (no control group)"
		}
		return "no memory, CPU or task bound"
	}
	var parts []string
	if l.Memory > 0 {
		parts = append(parts, fmt.Sprintf("memory at most %d MiB (everything it maps, files in memory included)", l.Memory>>20))
	} else {
		parts = append(parts, "memory unbounded")
	}
	if l.CPU > 0 {
		parts = append(parts, fmt.Sprintf("CPU at most %g (quota %d us per %d us)", l.CPU, cpuQuotaMicros(l.CPU), cpuPeriodMicros))
	} else {
		parts = append(parts, "CPU unbounded")
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("at most %d tasks", l.Pids))
	} else {
		parts = append(parts, "tasks unbounded")
	}
	return kind + ": " + strings.Join(parts, ", ")
}
