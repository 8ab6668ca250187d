// Package hostile is a scanner that attacks the host the way a hostile
// plugin author would: the host's tests (host/hostile) run it through a
// real host, as a plugin (host/internal/hostileplugin) or linked, and
// check that every attack fails.
//
// Its scanner, "hostile", reads the attacks to run from the due members
// of ff:idx:{p}:hostile, one attack per member ("NAME ARG..."), and
// reports each outcome as a note "NAME ARG...: OUTCOME" (Label: a long
// attack is shortened; an attack that
// got through says "ok" or what it reached). With the option
// "report" set to "list", it also pushes each note on
// ff:test:hostile:outcomes, for tests whose host runs as a process of
// its own.
//
// Modes (New):
//
//	longpattern  declare a 100 KB key pattern for GET
//	startup      attack the host's threads at start-up (StartupAttack)
//	shifty       declare a GET scope that names the process's pid: each
//	             launch declares a different policy
//	bigbatch     declare a batch of 5000 instead of 100
//	moresource   declare a second candidate source
package hostile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// OutcomeList is where the scanner pushes its notes when asked to.
const OutcomeList = "ff:test:hostile:outcomes"

// Scanner is the hostile scanner.
type Scanner struct {
	mode   string
	report string
}

// New returns the hostile scanner in the given mode ("" for the plain one).
func New(mode string) *Scanner { return &Scanner{mode: mode} }

// Info implements scannerapi.Scanner.
func (h *Scanner) Info() scannerapi.Info {
	getScope := []string{"ff:evil:*"}
	if h.mode == "longpattern" {
		// A pattern whose check against a long key costs the host
		// quadratic time in a backtracking matcher.
		getScope = append(getScope, "ff:"+strings.Repeat("*a", 50_000))
	}
	if h.mode == "shifty" {
		// What the operator reviewed is not what the next read says.
		getScope = append(getScope, fmt.Sprintf("ff:evil:%d:*", os.Getpid()))
	}
	batch := 100
	if h.mode == "bigbatch" {
		batch = 5000
	}
	sources := []scannerapi.CandidateSource{{
		Name: "attacks", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:hostile", Backlog: scannerapi.BacklogDue,
	}}
	if h.mode == "moresource" {
		// Makes the host read keys of another application's choosing.
		sources = append(sources, scannerapi.CandidateSource{Name: "theirs", Kind: scannerapi.SourceSetScan, Key: "ff:theirs:{p}:secrets"})
	}
	return scannerapi.Info{
		Name: "hostile", Version: "6.6.6", APIVersion: scannerapi.APIVersion,
		Family: keys.FamilyFlow, DefaultInterval: 200 * time.Millisecond, DefaultBatch: batch,
		Sources:  sources,
		Commands: []string{"GET", "SET", "DEL", "ZREM", "LPUSH", "MGET", "HMGET", "SRANDMEMBER"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "GET", Patterns: getScope},
			{Command: "MGET", Patterns: []string{"ff:evil:*"}},
			{Command: "HMGET", Patterns: []string{"ff:evil:*"}},
			{Command: "SRANDMEMBER", Patterns: []string{"ff:evil:*"}},
			{Command: "SET", Patterns: []string{"ff:evil:*"}},
			{Command: "DEL", Patterns: []string{"ff:evil:*"}},
			{Command: "ZREM", Patterns: []string{"ff:idx:{*}:hostile"}},
			{Command: "LPUSH", Patterns: []string{OutcomeList}},
		},
		Functions: []string{"ff_register_worker", "otherapp_write"},
		FunctionScopes: []scannerapi.FunctionScope{{Function: "ff_register_worker",
			Patterns: []string{"ff:worker:*:alive", "ff:worker:*:caps", "ff:idx:*:workers"}}},
		Options: h.options(),
	}
}

// options are the scanner's options; in mode startup, the outcome of the
// attacks made at start-up (StartupAttack) is the default of one.
func (h *Scanner) options() []scannerapi.OptionSpec {
	opts := []scannerapi.OptionSpec{{Name: "report", Type: scannerapi.OptionString, Default: "notes"}}
	if h.mode == "startup" {
		opts = append(opts, scannerapi.OptionSpec{Name: "startup", Type: scannerapi.OptionString, Default: startupText()})
	}
	return opts
}

// Configure implements scannerapi.Scanner.
func (h *Scanner) Configure(_ context.Context, opts map[string]string) error {
	h.report = opts["report"]
	return nil
}

// ScanPartition implements scannerapi.Scanner.
func (h *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	res := &scannerapi.ScanResult{}
	for _, c := range req.Candidates {
		name, arg, _ := strings.Cut(c.Member, " ")
		if name == "alloc" || name == "fillmem" || name == "panic" || name == "abort" {
			// An attack that kills the plugin is taken off first, so
			// that the restarted plugin does not run it again.
			if _, err := host.Exec(ctx, []scannerapi.Command{{"ZREM", c.Key, c.Member}}); err != nil {
				return nil, err
			}
		}
		if name == "scanerror" {
			// scanerror N: the scan fails with N bytes of error text
			// that carry newlines and a forged host log line.
			if _, err := host.Exec(ctx, []scannerapi.Command{{"ZREM", c.Key, c.Member}}); err != nil {
				return nil, err
			}
			return nil, errors.New(forged(arg))
		}
		outcome := "ok"
		if err := attack(ctx, host, name, arg); err != nil {
			outcome = err.Error()
		}
		note := Label(c.Member) + ": " + outcome
		res.Notes = append(res.Notes, note)
		cmds := []scannerapi.Command{{"ZREM", c.Key, c.Member}}
		if h.report == "list" {
			cmds = append(cmds, scannerapi.Command{"LPUSH", OutcomeList, note})
		}
		if _, err := host.Exec(ctx, cmds); err != nil {
			return nil, err
		}
		res.Processed++
	}
	return res, nil
}

// Label names an attack in its note: the attack itself, or for a long
// one (a 300 KB key) its first 100 bytes and its length, so that the
// outcome fits in the note the host keeps (a few hundred bytes).
func Label(attack string) string {
	if len(attack) <= 200 {
		return attack
	}
	return fmt.Sprintf("%s…(%d bytes)", attack[:100], len(attack))
}

// ForgedLine is the host log line the text attacks try to forge.
const ForgedLine = "2024-01-01T00:00:00.000Z [ERROR] ffscan: forged by a plugin"

// StderrDone is the last line the stderr attack writes.
const StderrDone = "hostile stderr flood done"

// forged is text of n bytes (n given as a string) that starts with a
// forged host log line on a line of its own.
func forged(n string) string {
	size, err := strconv.Atoi(n)
	if err != nil {
		return err.Error()
	}
	head := "failed\n" + ForgedLine + "\n\x1b[2K\r"
	return head + strings.Repeat("e\n", max(0, size-len(head))/2)
}

// floodStderr writes to file descriptor 2, which the SDK's logger and
// the Go runtime write to and the host reads (the os.Stderr of a plugin
// is a pipe to the host's SyncStderr, which discards it).
func floodStderr(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("stderr N LINES")
	}
	size, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	lines, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	fd2 := os.NewFile(2, "stderr")
	var b strings.Builder
	b.WriteString("[ERROR] ffscan: forged by a plugin\n")
	b.WriteString(`{"@level":"error","@message":"x\n` + ForgedLine + `\n","@timestamp":"2024-01-01T00:00:00.000000Z","k":"v\n` + ForgedLine + `"}` + "\n")
	b.WriteString(strings.Repeat("s", size) + "\n")
	for i := range lines {
		fmt.Fprintf(&b, "flood %d %s\n", i, strings.Repeat("f", 100))
	}
	b.WriteString(StderrDone + "\n")
	if _, err := fd2.WriteString(b.String()); err != nil {
		return err
	}
	return reached{"wrote to stderr"}
}

// held is what the alloc attack holds.
var held [][]byte

// reached is an attack that got through: err says what it reached.
type reached struct{ what string }

func (r reached) Error() string { return "ok: " + r.what }

// attack runs one attack. A nil error or a reached error means it got
// through.
func attack(ctx context.Context, host scannerapi.Host, name, arg string) error {
	args := strings.Fields(arg)
	switch name {
	case "mptcp":
		return dialMPTCP(arg)
	case "listen":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		return reached{"listening on " + ln.Addr().String()}
	case "udp":
		conn, err := net.Dial("udp", arg)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("exfiltrated")); err != nil {
			return err
		}
		return reached{"sent a datagram to " + arg}
	case "fcall":
		// fcall FUNCTION NUMKEYS KEY... ARG...
		return replyOf(host.Exec(ctx, []scannerapi.Command{append(scannerapi.Command{"FCALL"}, args...)}))
	case "exec":
		// exec COMMAND ARG...: one command through the host.
		return replyOf(host.Exec(ctx, []scannerapi.Command{args}))
	case "ping":
		return reached{"pong"}
	case "bignote":
		// bignote N: a note of N bytes with newlines and a forged line.
		return reached{forged(arg)}
	case "stderr":
		// stderr N LINES: write to the stderr the host relays to its
		// log: forged host lines (raw and as a JSON log entry), one
		// line of N bytes, LINES more lines, then StderrDone.
		return floodStderr(args)
	case "alloc":
		// alloc MIB: allocate and touch MIB MiB, and hold it.
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err
		}
		for range n / 16 {
			chunk := make([]byte, 16<<20)
			for i := 0; i < len(chunk); i += 4096 {
				chunk[i] = 1
			}
			held = append(held, chunk)
		}
		return reached{fmt.Sprintf("holding %d MiB", len(held)*16)}
	case "panic":
		// panic TEXT: the plugin dies of a panic no one recovers,
		// printing TEXT (with \e for an escape) as its crash report's
		// first line.
		text := strings.ReplaceAll(strings.Join(args, " "), `\e`, "\x1b")
		go func() { panic(text) }()
		select {}
	case "abort":
		// abort: the plugin dies of a SIGABRT, whose report the Go
		// runtime begins with "SIGABRT: abort" (as when the C library
		// cannot start a thread for it).
		if err := unix.Kill(os.Getpid(), unix.SIGABRT); err != nil {
			return err
		}
		select {}
	case "caps":
		return capabilities()
	case "setuid":
		// setuid UID, on this thread only (the C library's setuid, which
		// Go's syscall.Setuid imitates, changes every thread).
		uid, err := strconv.Atoi(arg)
		if err != nil {
			return err
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETUID, uintptr(uid), 0, 0); e != 0 {
			return os.NewSyscallError("setuid", e)
		}
		return reached{fmt.Sprintf("uid %d", unix.Getuid())}
	case "getmany":
		// getmany KEY N: N GETs of KEY in one batch.
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		cmds := make([]scannerapi.Command, n)
		for i := range cmds {
			cmds[i] = scannerapi.Command{"GET", args[0]}
		}
		rs, err := host.Exec(ctx, cmds)
		if err != nil {
			return err
		}
		return tally(rs)
	case "mget", "hmget":
		// mget KEY N: one MGET naming KEY N times; hmget KEY FIELD N:
		// one HMGET naming FIELD N times. The server answers the value
		// N times over.
		n, err := strconv.Atoi(args[len(args)-1])
		if err != nil {
			return err
		}
		cmd := scannerapi.Command{strings.ToUpper(name)}
		if name == "hmget" {
			cmd = append(cmd, args[0])
		}
		for range n {
			cmd = append(cmd, args[len(args)-2])
		}
		return valuesOf(host.Exec(ctx, []scannerapi.Command{cmd}))
	case "srandmember":
		// srandmember KEY COUNT: a negative COUNT repeats members.
		return valuesOf(host.Exec(ctx, []scannerapi.Command{{"SRANDMEMBER", args[0], args[1]}}))
	case "delmany":
		// delmany N LEN: N DELs of keys of LEN bytes outside the scope.
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		size, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		cmds := make([]scannerapi.Command, n)
		for i := range cmds {
			k := fmt.Sprintf("ff:theirs:%d:", i)
			cmds[i] = scannerapi.Command{"DEL", k + strings.Repeat("k", max(0, size-len(k)))}
		}
		rs, err := host.Exec(ctx, cmds)
		if err != nil {
			return err
		}
		return tally(rs)
	default:
		if err, ok := escape(name, arg); ok {
			return err
		}
		return fmt.Errorf("unknown attack %q", name)
	}
}

// tally sums up a batch's replies: values read (and their bytes), and
// refusals (and the first one's text).
func tally(rs []scannerapi.Reply) error {
	var values, refused, bytes, refusals int
	first := ""
	for _, r := range rs {
		if err := r.AsError(); err != nil {
			if refused == 0 {
				first = err.Error()
			}
			refused++
			refusals += len(r.Err)
			continue
		}
		values++
		bytes += len(r.Str)
	}
	return fmt.Errorf("%d values read (%d bytes), %d refused (%d bytes of refusals): %s", values, bytes, refused, refusals, first)
}

// valuesOf reports the single array reply of a batch: an error reply as
// an error, else how many values it held (and their bytes) as reached.
func valuesOf(rs []scannerapi.Reply, err error) error {
	if err != nil {
		return err
	}
	if len(rs) != 1 {
		return fmt.Errorf("%d replies", len(rs))
	}
	if err := rs[0].AsError(); err != nil {
		return err
	}
	bytes := 0
	for _, v := range rs[0].Array {
		bytes += len(v.Str)
	}
	return reached{fmt.Sprintf("%d values read (%d bytes)", len(rs[0].Array), bytes)}
}

// replyOf reports the single reply of a batch: an error reply as an
// error, anything else as reached.
func replyOf(rs []scannerapi.Reply, err error) error {
	if err != nil {
		return err
	}
	if len(rs) != 1 {
		return fmt.Errorf("%d replies", len(rs))
	}
	if err := rs[0].AsError(); err != nil {
		return err
	}
	s, _ := rs[0].Text()
	return reached{fmt.Sprintf("reply %q", s)}
}

// capabilities reports the process's capability sets: any capability
// means the attack got through.
func capabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capget", err)
	}
	eff := uint64(data[1].Effective)<<32 | uint64(data[0].Effective)
	prm := uint64(data[1].Permitted)<<32 | uint64(data[0].Permitted)
	inh := uint64(data[1].Inheritable)<<32 | uint64(data[0].Inheritable)
	bnd := 0
	for c := 0; c < 64; c++ {
		if n, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && n == 1 {
			bnd++
		}
	}
	sets := fmt.Sprintf("uid %d, effective %#x, permitted %#x, inheritable %#x, %d in the bounding set", unix.Getuid(), eff, prm, inh, bnd)
	if eff|prm|inh != 0 || bnd != 0 {
		return reached{sets}
	}
	return errors.New("no capabilities: " + sets)
}

// dialMPTCP connects to addr with a multipath TCP socket (which
// Landlock's TCP rules do not cover) and speaks RESP: a reply means it
// reached the server.
func dialMPTCP(addr string) error {
	ap, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_MPTCP)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	f := os.NewFile(uintptr(fd), "mptcp")
	defer f.Close()
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	if err := unix.Connect(fd, sa); err != nil {
		return os.NewSyscallError("connect", err)
	}
	if _, err := f.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := f.Read(buf)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return reached{"the server answered " + strconv.Quote(string(buf[:n]))}
}

// SampleBacklog implements scannerapi.BacklogSampler.
func (h *Scanner) SampleBacklog(context.Context, scannerapi.Host, []keys.Partition) ([]int64, error) {
	return nil, nil
}
