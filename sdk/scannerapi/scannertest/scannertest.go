// Package scannertest helps plugin authors test a scanner both ways it
// runs: linked in-process and as a real plugin subprocess, against a real
// server.
//
// Run does it all in one call: it starts a server (valkey-server or
// redis-server from PATH), boots an ffscan host on it, loads the case's
// fixtures, and runs the scanner through the host exactly as production
// does (candidates fetched by the scheduler, commands checked against what
// the scanner declared), first linked, then built and launched as a
// plugin, each from the same fixtures on an emptied server. It returns a
// Report per run: partitions scanned, items processed and skipped, errors
// by class and code, the commands the scanner ran and any the host
// refused, its notes, and every key left on the server. Same checks that
// the two runs agree.
//
//	linked, plugin := scannertest.Run(t, scannertest.Case{
//		New:      func() scannerapi.Scanner { return mine.New() },
//		Plugin:   "example.com/mine/cmd/mine",
//		Options:  map[string]string{"max_age": "1h"},
//		Fixtures: []scannerapi.Command{{"ZADD", "ff:idx:{fp:3}:lane:default:delayed", "1000", id}},
//		Check: func(t testing.TB, r scannertest.Report, c valkey.Client) {
//			assert.Equal(t, int64(1), r.Processed)
//		},
//	})
//	scannertest.Same(t, linked, plugin)
//
// The lower-level helpers below drive a scanner by hand: Callbacks and
// Host run commands with no allowlist (any command, any key), BuildPlugin
// and Launch start a plugin process. Production hosts use their own
// callbacks, which enforce each scanner's allowlist; Run uses those.
package scannertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Callbacks returns Callbacks that run every batch on client with one
// DoMulti (pipelined), with no allowlist: any command, any key. Commands are
// routed by their first key (FCALL: its KEYS), so a cluster client works
// for single-slot batches.
func Callbacks(client valkey.Client) scannerapi.Callbacks {
	return scannerapi.CallbacksFunc(func(ctx context.Context, _ string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		return Exec(ctx, client, cmds)
	})
}

// Host returns Callbacks(client) bound to no particular scanner.
func Host(client valkey.Client) scannerapi.Host {
	return scannerapi.BindHost(Callbacks(client), "")
}

// Exec runs cmds on client pipelined and converts the replies.
func Exec(ctx context.Context, client valkey.Client, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	built := make(valkey.Commands, len(cmds))
	for i, c := range cmds {
		if len(c) == 0 || c[0] == "" {
			return nil, errors.New("scannertest: empty command")
		}
		head, ks, tail := splitCommand(c)
		built[i] = client.B().Arbitrary(head...).Keys(ks...).Args(tail...).Build()
	}
	results := client.DoMulti(ctx, built...)
	out := make([]scannerapi.Reply, len(results))
	for i, r := range results {
		out[i] = ReplyOf(r)
	}
	return out, nil
}

// splitCommand separates a command's key arguments, as far as routing
// needs them: FCALL/FCALL_RO's KEYS, none for keyless commands, else the
// first argument.
func splitCommand(c scannerapi.Command) (head, ks, tail []string) {
	switch strings.ToUpper(c[0]) {
	case "FCALL", "FCALL_RO":
		if len(c) >= 3 {
			if n, err := strconv.Atoi(c[2]); err == nil && n >= 0 && 3+n <= len(c) {
				return c[:3], c[3 : 3+n], c[3+n:]
			}
		}
		return c, nil, nil
	case "TIME", "PING", "ECHO", "INFO", "FUNCTION", "DBSIZE":
		return c, nil, nil
	}
	if len(c) > 1 {
		return c[:1], c[1:2], c[2:]
	}
	return c, nil, nil
}

// ReplyOf converts a valkey-go result: a RESP error reply becomes class
// server, a missing reply (connection, timeout) class transport.
func ReplyOf(r valkey.ValkeyResult) scannerapi.Reply {
	msg, err := r.ToMessage()
	if err != nil {
		if valkey.IsValkeyNil(err) {
			return scannerapi.Reply{Kind: scannerapi.KindNil}
		}
		var verr *valkey.ValkeyError
		if errors.As(err, &verr) {
			return scannerapi.Reply{Kind: scannerapi.KindError, Err: verr.Error(), ErrClass: scannerapi.ErrServer}
		}
		return scannerapi.Reply{Kind: scannerapi.KindError, Err: err.Error(), ErrClass: scannerapi.ErrTransport}
	}
	return convert(&msg)
}

func convert(m *valkey.ValkeyMessage) scannerapi.Reply {
	switch {
	case m.IsNil():
		return scannerapi.Reply{Kind: scannerapi.KindNil}
	case m.IsInt64():
		v, _ := m.AsInt64()
		return scannerapi.Reply{Kind: scannerapi.KindInt, Int: v}
	case m.IsBool():
		v, _ := m.AsBool()
		r := scannerapi.Reply{Kind: scannerapi.KindInt}
		if v {
			r.Int = 1
		}
		return r
	case m.IsFloat64():
		v, _ := m.AsFloat64()
		return scannerapi.Reply{Kind: scannerapi.KindFloat, Float: v}
	case m.IsString():
		v, _ := m.ToString()
		return scannerapi.Reply{Kind: scannerapi.KindString, Str: v}
	case m.IsArray():
		vals, _ := m.ToArray()
		out := make([]scannerapi.Reply, len(vals))
		for i := range vals {
			out[i] = convert(&vals[i])
		}
		return scannerapi.Reply{Kind: scannerapi.KindArray, Array: out}
	case m.IsMap():
		mm, _ := m.ToMap()
		ks := make([]string, 0, len(mm))
		for k := range mm {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		out := make([]scannerapi.Reply, 0, 2*len(ks))
		for _, k := range ks {
			v := mm[k]
			out = append(out, scannerapi.Reply{Kind: scannerapi.KindString, Str: k}, convert(&v))
		}
		return scannerapi.Reply{Kind: scannerapi.KindArray, Array: out}
	}
	if err := m.Error(); err != nil {
		return scannerapi.Reply{Kind: scannerapi.KindError, Err: err.Error(), ErrClass: scannerapi.ErrServer}
	}
	v, err := m.ToAny()
	if err != nil {
		return scannerapi.Reply{Kind: scannerapi.KindError, Err: err.Error(), ErrClass: scannerapi.ErrServer}
	}
	return scannerapi.Reply{Kind: scannerapi.KindString, Str: fmt.Sprint(v)}
}

// BuildPlugin builds the main package pkg (an import path or a directory)
// into a temporary directory removed after the test, and returns the
// binary's path.
func BuildPlugin(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scannertest: go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// Launch starts a plugin for one test with cb as its callbacks and kills it
// (the whole process group) when the test ends.
func Launch(t testing.TB, path string, cb scannerapi.Callbacks) *scannerapi.Plugin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := scannerapi.Launch(ctx, scannerapi.LaunchConfig{
		Path:      path,
		Callbacks: cb,
		Logger:    hclog.New(&hclog.LoggerOptions{Name: "scannertest", Level: hclog.Warn, Output: os.Stderr}),
	})
	if err != nil {
		t.Fatalf("scannertest: %v", err)
	}
	t.Cleanup(p.Kill)
	return p
}
