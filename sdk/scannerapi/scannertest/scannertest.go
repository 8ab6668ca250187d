// Package scannertest helps plugin authors test a scanner both ways it
// runs: linked in-process and as a real plugin subprocess, against a real
// server.
//
// Run does it all in one call: it starts a server (valkey-server or
// redis-server from PATH, through sdk/testserver), boots a scanner host on
// it through the case's Runner, loads the case's fixtures, and runs the
// scanner through that host exactly as production does (candidates
// fetched by the scheduler, commands checked against what the scanner
// declared), first linked, then built and launched as a plugin, each from
// the same fixtures on an emptied server. It returns a Report per run:
// partitions scanned, items processed and skipped, errors by class and
// code, the commands the scanner ran and any the host refused, its notes,
// and every key left on the server. Same checks that the two runs agree.
//
//	linked, plugin := scannertest.Run(t, scannertest.Case{
//		Runner:   hosttest.Runner{}, // github.com/ffscan/ffscan/host/hosttest
//		New:      func() scannerapi.Scanner { return mine.New() },
//		Plugin:   "example.com/mine/cmd/mine",
//		Options:  map[string]string{"max_age": "1h"},
//		Fixtures: []scannerapi.Command{{"ZADD", "ff:idx:{fp:3}:lane:default:delayed", "1000", id}},
//		Check: func(t testing.TB, r scannertest.Report, c valkey.Client) {
//			if r.Processed != 1 { t.Errorf("processed %d", r.Processed) }
//		},
//	})
//	scannertest.Same(t, linked, plugin)
//
// The package links no host: the host is behind the Runner interface, so
// a test that only uses the lower-level helpers builds the SDK's few
// dependencies. Those helpers drive a scanner by hand: Callbacks and Host
// run commands with no allowlist (any command, any key), BuildPlugin,
// PluginBinary and Launch start a plugin process, Counter counts what a
// scanner ran. Production hosts use their own callbacks, which enforce
// each scanner's allowlist; Run uses those.
package scannertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/valkeyreply"
)

// Callbacks returns Callbacks that run every batch on client with one
// DoMulti (pipelined), with no allowlist: any command, any key. Commands are
// routed by their first key (FCALL: its KEYS), so a cluster client works
// for single-slot batches.
func Callbacks(client valkey.Client) pluginhost.Callbacks {
	return pluginhost.CallbacksFunc(func(ctx context.Context, _ string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		return Exec(ctx, client, cmds)
	})
}

// Host returns Callbacks(client) bound to no particular scanner.
func Host(client valkey.Client) scannerapi.Host {
	return pluginhost.BindHost(Callbacks(client), "")
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
	if _, ks, tail, ok := scannerapi.ParseFCall(c); ok {
		return c[:3], ks, tail
	}
	switch strings.ToUpper(c[0]) {
	case "FCALL", "FCALL_RO":
		return c, nil, nil // malformed: sent as it is, the server answers
	case "TIME", "PING", "ECHO", "INFO", "FUNCTION", "DBSIZE":
		return c, nil, nil
	}
	if len(c) > 1 {
		return c[:1], c[1:2], c[2:]
	}
	return c, nil, nil
}

// ReplyOf converts a valkey-go result: a RESP error reply becomes class
// server, a missing reply (connection, timeout) class transport. It is the
// conversion the host itself uses.
func ReplyOf(r valkey.ValkeyResult) scannerapi.Reply { return valkeyreply.Of(r) }

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
func Launch(t testing.TB, path string, cb pluginhost.Callbacks) *pluginhost.Plugin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pluginhost.Launch(ctx, pluginhost.LaunchConfig{
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
