// Package measure holds the small measuring tools of the benchmark runner:
// latency distributions, process CPU from /proc, server command counts
// from INFO commandstats, Prometheus text scraping and a description of
// the machine.
package measure

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Dist summarises a latency sample.
type Dist struct {
	N                       int
	Min, P50, P90, P99, Max time.Duration
	Mean                    time.Duration
}

// Distribution computes Dist with nearest-rank percentiles.
func Distribution(sample []time.Duration) Dist {
	if len(sample) == 0 {
		return Dist{}
	}
	s := slices.Clone(sample)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Dist{N: len(s), Min: s[0], P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: s[len(s)-1],
		Mean: sum / time.Duration(len(s))}
}

// String renders the distribution in milliseconds.
func (d Dist) String() string {
	if d.N == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s  (n=%d, min %s, mean %s)",
		Ms(d.P50), Ms(d.P90), Ms(d.P99), Ms(d.Max), d.N, Ms(d.Min), Ms(d.Mean))
}

// Ms formats a duration as milliseconds with one decimal.
func Ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times. It is 100 on
// every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ProcCPU returns the user+system CPU time a process has used so far
// (utime+stime in /proc/<pid>/stat; children are not included).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; fields after it start
	// at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// SystemCPU returns the busy CPU time of the whole machine so far, all
// CPUs together (/proc/stat: user, nice, system, irq, softirq, steal).
// Its delta minus the CPU of the processes under test is what everything
// else on the machine used meanwhile.
func SystemCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += v
	}
	return time.Duration(busy) * clockTick, nil
}

// CommandStats returns the calls per command from INFO commandstats
// (lower-case command names, e.g. "zrange", "fcall").
func CommandStats(ctx context.Context, c valkey.Client) (map[string]int64, error) {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, err
	}
	return ParseCommandStats(info), nil
}

// ParseCommandStats reads the calls per command of an INFO commandstats
// reply.
func ParseCommandStats(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// ServerCPU returns the server's used_cpu_user + used_cpu_sys (INFO cpu).
func ServerCPU(ctx context.Context, c valkey.Client) (time.Duration, error) {
	info, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, err
	}
	return ParseServerCPU(info), nil
}

// ParseServerCPU reads used_cpu_user + used_cpu_sys of an INFO cpu reply.
func ParseServerCPU(info string) time.Duration {
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// RawInfo sends one INFO command on a fresh plain TCP connection, without
// any client handshake, and closes it: the only command it adds to the
// server's statistics is that INFO.
func RawInfo(addr, section string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "INFO %s\r\n", section); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO %s: unexpected reply %q", section, strings.TrimSpace(head))
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return "", err
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body[:n]), nil
}

// InfoField returns one field of an INFO section ("" when absent).
func InfoField(ctx context.Context, c valkey.Client, section, field string) string {
	info, err := c.Do(ctx, c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// Load returns the 1, 5 and 15 minute load averages as printed in
// /proc/loadavg.
func Load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Load1 returns the 1-minute load average (-1 when unknown).
func Load1() float64 {
	f := strings.Fields(Load())
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs   int
	CPU    string
	MemGiB float64
	Kernel string
	Go     string
	Server string // name and version of the Valkey/Redis server
}

// Describe collects the machine description; server is filled by the
// caller (it needs a client).
func Describe() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), CPU: "unknown", Kernel: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				m.MemGiB = kb / (1 << 20)
				break
			}
		}
		f.Close()
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}

// Metrics is a scrape of Prometheus text: sample line (name plus sorted
// labels as printed) -> value.
type Metrics map[string]float64

// ParseMetrics reads the Prometheus text exposition format, keeping every
// sample line.
func ParseMetrics(text string) Metrics {
	m := Metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// Sum adds every sample whose name is name and whose labels contain all of
// the given label="value" pairs.
func (m Metrics) Sum(name string, labels ...string) float64 {
	var total float64
	for k, v := range m {
		n, rest, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}
