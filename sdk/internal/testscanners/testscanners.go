// Package testscanners holds small scanners that exercise the plugin
// transport in the SDK's tests (pluginhost's launch tests), linked in or
// served by internal/testplugin.
package testscanners

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func info(name string) scannerapi.Info {
	return scannerapi.Info{
		Name: name, Version: "0.0.1", APIVersion: scannerapi.APIVersion,
		Family: keys.FamilyFlow, DefaultInterval: time.Second, DefaultBatch: 10,
		Sources: []scannerapi.CandidateSource{{
			Name: "due", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:test", Backlog: scannerapi.BacklogPlugin,
		}},
		Commands:       []string{"ECHO", "GET"},
		KeyScopes:      []scannerapi.KeyScope{{Command: "GET", Patterns: []string{"ff:test:{*}:*", "ff:other"}}},
		Functions:      []string{"ff_version"},
		FunctionScopes: []scannerapi.FunctionScope{{Function: "ff_version", Patterns: []string{"ff:test:{*}:*"}}},
		Options:        []scannerapi.OptionSpec{{Name: "prefix", Type: scannerapi.OptionString}},
	}
}

// Echo sends one ECHO per candidate through the host and reports the
// replies as notes; candidates whose member is "fail" count as errors.
type Echo struct {
	mu     sync.Mutex
	prefix string
}

// Info implements scannerapi.Scanner.
func (e *Echo) Info() scannerapi.Info { return info("echo") }

// Configure accepts "prefix"; "reject" fails.
func (e *Echo) Configure(ctx context.Context, options map[string]string) error {
	if _, bad := options["reject"]; bad {
		return errors.New("option reject is not allowed")
	}
	scannerapi.Logger(ctx).Info("configured", "options", len(options))
	e.mu.Lock()
	e.prefix = options["prefix"]
	e.mu.Unlock()
	return nil
}

// ScanPartition implements scannerapi.Scanner.
func (e *Echo) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	e.mu.Lock()
	prefix := e.prefix
	e.mu.Unlock()
	res := &scannerapi.ScanResult{}
	var cmds []scannerapi.Command
	for _, c := range req.Candidates {
		if c.Member == "error" {
			return nil, fmt.Errorf("candidate says error")
		}
		cmds = append(cmds, scannerapi.Command{"ECHO", prefix + c.Member})
	}
	replies, err := host.Exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	for _, r := range replies {
		if err := r.AsError(); err != nil {
			res.AddError(r.ErrClass, "echo", 1)
			continue
		}
		s, _ := r.Text()
		res.Notes = append(res.Notes, s)
		res.Processed++
	}
	res.More = len(req.Candidates) >= req.Batch
	res.Backlog, res.HasBacklog = int64(len(req.Candidates)), true
	// Every result field crosses the wire (TestLaunchedScannerMatchesLinked).
	res.Settled, res.Lag, res.HasLag = 2, 1500*time.Millisecond, true
	res.Notes = append(res.Notes, fmt.Sprintf("%s %s now=%d cycle=%d dry=%v lanes=%v", req.Scanner, req.Partition, req.NowMs, req.Cycle, req.DryRun, req.Lanes))
	return res, nil
}

// SampleBacklog returns 10 × the partition index.
func (e *Echo) SampleBacklog(_ context.Context, _ scannerapi.Host, parts []keys.Partition) ([]int64, error) {
	out := make([]int64, len(parts))
	for i, p := range parts {
		out[i] = int64(p.Index) * 10
	}
	return out, nil
}

// Sleeper blocks in ScanPartition until its context ends, after writing its
// pid to the path in the first candidate's member (if any).
type Sleeper struct{}

// Info implements scannerapi.Scanner.
func (Sleeper) Info() scannerapi.Info { return info("sleeper") }

// Configure implements scannerapi.Scanner.
func (Sleeper) Configure(context.Context, map[string]string) error { return nil }

// ScanPartition implements scannerapi.Scanner.
func (Sleeper) ScanPartition(ctx context.Context, _ scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if len(req.Candidates) > 0 {
		_ = os.WriteFile(req.Candidates[0].Member, []byte(fmt.Sprint(os.Getpid())), 0o600)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// SampleBacklog implements scannerapi.BacklogSampler.
func (Sleeper) SampleBacklog(context.Context, scannerapi.Host, []keys.Partition) ([]int64, error) {
	return nil, nil
}

// Panicker panics in ScanPartition.
type Panicker struct{}

// Info implements scannerapi.Scanner.
func (Panicker) Info() scannerapi.Info { return info("panicker") }

// Configure implements scannerapi.Scanner.
func (Panicker) Configure(context.Context, map[string]string) error { return nil }

// ScanPartition implements scannerapi.Scanner.
func (Panicker) ScanPartition(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	panic("boom")
}

// SampleBacklog implements scannerapi.BacklogSampler.
func (Panicker) SampleBacklog(context.Context, scannerapi.Host, []keys.Partition) ([]int64, error) {
	return []int64{}, nil
}

// Spawner starts a long "sleep" child process (which stays in the
// plugin's process group) and writes the child's pid to the path in the
// first candidate's member. It is not a BacklogSampler.
type Spawner struct{}

// Info implements scannerapi.Scanner.
func (Spawner) Info() scannerapi.Info { return info("spawner") }

// Configure implements scannerapi.Scanner.
func (Spawner) Configure(context.Context, map[string]string) error { return nil }

// ScanPartition implements scannerapi.Scanner.
func (Spawner) ScanPartition(_ context.Context, _ scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait() }()
	if len(req.Candidates) > 0 {
		if err := os.WriteFile(req.Candidates[0].Member, []byte(fmt.Sprint(cmd.Process.Pid)), 0o600); err != nil {
			return nil, err
		}
	}
	return &scannerapi.ScanResult{Processed: 1}, nil
}

// Prober tries, for each candidate, what a hostile plugin would, and
// reports the outcome as a note "ACTION ARG: ok" or "ACTION ARG: <error>".
// Members are "read:PATH" (read a file), "write:PATH" (create a file),
// "dial:HOST:PORT" (TCP connect), "mptcp:HOST:PORT" (multipath TCP
// connect), "listen:tcp" (a TCP listener), "udp:HOST:PORT" (send a
// datagram), "i386socket:" (a UDP socket through the i386 syscall
// table, amd64 only), "signal:PID" (signal 0, a permission check),
// "environ:PID" (read /proc/PID/environ) and "spawn:PATH" (run PATH in a
// session of its own, as a child meant to outlive the plugin would be
// started).
type Prober struct{}

// Info implements scannerapi.Scanner.
func (Prober) Info() scannerapi.Info { return info("prober") }

// Configure implements scannerapi.Scanner.
func (Prober) Configure(context.Context, map[string]string) error { return nil }

// ScanPartition implements scannerapi.Scanner.
func (Prober) ScanPartition(_ context.Context, _ scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	res := &scannerapi.ScanResult{}
	for _, c := range req.Candidates {
		action, arg, _ := strings.Cut(c.Member, ":")
		var err error
		switch action {
		case "read":
			_, err = os.ReadFile(arg)
		case "write":
			err = os.WriteFile(arg, []byte("x"), 0o600)
		case "dial":
			var conn net.Conn
			if conn, err = net.DialTimeout("tcp", arg, 2*time.Second); err == nil {
				conn.Close()
			}
		case "mptcp":
			var conn net.Conn
			d := net.Dialer{Timeout: 2 * time.Second}
			d.SetMultipathTCP(true)
			if conn, err = d.Dial("tcp", arg); err == nil {
				conn.Close()
			}
		case "listen":
			var ln net.Listener
			if ln, err = net.Listen(arg, "127.0.0.1:0"); err == nil {
				ln.Close()
			}
		case "udp":
			var conn net.Conn
			if conn, err = net.Dial("udp", arg); err == nil {
				_, err = conn.Write([]byte("probe"))
				conn.Close()
			}
		case "i386socket":
			err = i386Socket(syscall.AF_INET, syscall.SOCK_DGRAM)
		case "signal":
			var pid int
			if pid, err = strconv.Atoi(arg); err == nil {
				err = syscall.Kill(pid, 0)
			}
		case "environ":
			_, err = os.ReadFile("/proc/" + arg + "/environ")
		case "spawn":
			child := exec.Command(arg)
			child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			err = child.Run()
		default:
			err = fmt.Errorf("unknown probe %q", action)
		}
		outcome := "ok"
		if err != nil {
			outcome = err.Error()
		}
		res.Note("%s %s: %s", action, arg, outcome)
	}
	return res, nil
}

// WithAPIVersion makes s declare contract version v, as a scanner built
// against an SDK whose APIVersion was v would.
func WithAPIVersion(s scannerapi.Scanner, v int) scannerapi.Scanner {
	return versioned{Scanner: s, v: v}
}

type versioned struct {
	scannerapi.Scanner
	v int
}

func (s versioned) Info() scannerapi.Info {
	in := s.Scanner.Info()
	in.APIVersion = s.v
	return in
}

// All returns one of each.
func All() []scannerapi.Scanner {
	return []scannerapi.Scanner{&Echo{}, Sleeper{}, Panicker{}, Spawner{}, Prober{}}
}

// DrainBatch is a callback batch as lease_expiry sends it in the drain:
// n FCALLs of ff_mark_lease_expired_if_due (four keys and the execution
// id), and the replies the function gives a marked lease. The packed
// encoding's benchmarks measure both sides on it.
func DrainBatch(n int) ([]scannerapi.Command, []scannerapi.Reply) {
	cmds := make([]scannerapi.Command, n)
	replies := make([]scannerapi.Reply, n)
	for i := range cmds {
		eid := fmt.Sprintf("{fp:17}:0b7c4e3a-9d1f-4c2a-8e5b-%012x", i)
		core := "ff:exec:{fp:17}:" + eid + ":core"
		cmds[i] = scannerapi.FCall("ff_mark_lease_expired_if_due",
			[]string{core, "ff:exec:{fp:17}:" + eid + ":lease:current", "ff:idx:{fp:17}:lease_expiry", "ff:exec:{fp:17}:" + eid + ":lease:history"},
			eid)
		replies[i] = scannerapi.Reply{Kind: scannerapi.KindArray, Array: []scannerapi.Reply{
			{Kind: scannerapi.KindInt, Int: 1}, {Kind: scannerapi.KindString, Str: "OK"}, {Kind: scannerapi.KindString, Str: "marked"}}}
	}
	return cmds, replies
}
