// Command testplugin serves a scanner for the host's own end-to-end tests:
// "hostwork" moves due members of ff:idx:{p}:hostwork into the set
// ff:test:{p}:done (ZREM + SADD through the host), optionally sleeping
// first (option "delay") so a test can kill or stop things mid-scan.
//
// Link-time variables (go build -ldflags "-X main.version=... -X
// main.mode=...") make variants with other bytes and behaviour for the
// hot-swap and versioning tests:
//
//	version          Info.Version (default 1.0.0)
//	mode=exit        exit at once: fails the handshake
//	mode=crash       serve, and exit with status 3 when the test sends
//	                 SIGUSR1 (the test decides when the plugin crashes)
//	mode=api1        declare scanner API version 1
//	mode=raw99       answer the handshake with protocol version 99
//	mode=greedy      declare commands no plugin may run
//	mode=wide        also declare DEL (on any key): a wider policy
//	mode=lanes       read ff:idx:{p}:lane:{lane}:hostwork, one key per lane
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

var (
	version = "1.0.0"
	mode    = ""
)

type hostwork struct {
	mu    sync.Mutex
	delay time.Duration
}

func (h *hostwork) Info() scannerapi.Info {
	commands := []string{"ZREM", "SADD"}
	if mode == "greedy" {
		// Asks for what no plugin may run.
		commands = append(commands, "FLUSHALL", "CONFIG")
	}
	if mode == "wide" {
		// Asks for more than the plain build: needs the operator's
		// approval before it may replace it.
		commands = append(commands, "DEL")
	}
	src := scannerapi.CandidateSource{
		Name: "work", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:hostwork", Backlog: scannerapi.BacklogDue,
	}
	if mode == "lanes" {
		src.Key = "ff:idx:{p}:lane:{lane}:hostwork"
	}
	return scannerapi.Info{
		Name: "hostwork", Version: version, APIVersion: apiVersion(),
		Family: keys.FamilyFlow, DefaultInterval: 200 * time.Millisecond, DefaultBatch: 20,
		Sources:  []scannerapi.CandidateSource{src},
		Commands: commands,
		KeyScopes: []scannerapi.KeyScope{
			{Command: "ZREM", Patterns: []string{src.KeyPattern()}},
			{Command: "SADD", Patterns: []string{"ff:test:{*}:done"}},
		},
		Options: []scannerapi.OptionSpec{{Name: "delay", Type: scannerapi.OptionDuration, Default: "0s", Description: "sleep before each partition"}},
	}
}

func (h *hostwork) Configure(_ context.Context, opts map[string]string) error {
	d, err := time.ParseDuration(opts["delay"])
	if err != nil {
		return err
	}
	if d < 0 {
		// A value the schema lets through but the scanner refuses, as
		// real scanners do with out-of-range options.
		return fmt.Errorf("delay %s is negative", d)
	}
	h.mu.Lock()
	h.delay = d
	h.mu.Unlock()
	return nil
}

func (h *hostwork) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	h.mu.Lock()
	d := h.delay
	h.mu.Unlock()
	if d > 0 && !clock.Sleep(ctx, clock.Real(), d) {
		return nil, ctx.Err()
	}
	res := &scannerapi.ScanResult{More: len(req.Candidates) == req.Batch}
	if req.DryRun {
		res.Skipped = int64(len(req.Candidates))
		res.Notes = append(res.Notes, "dry run: would move", req.Candidates[0].Member)
		return res, nil
	}
	done := "ff:test:" + req.Partition.Tag() + ":done"
	var cmds []scannerapi.Command
	for _, c := range req.Candidates {
		// Record first, then remove: a crash in between repeats the item,
		// it never loses it.
		cmds = append(cmds, scannerapi.Command{"SADD", done, c.Member}, scannerapi.Command{"ZREM", c.Key, c.Member})
	}
	replies, err := host.Exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(replies); i += 2 {
		if replies[i].Failed() {
			res.AddError(replies[i].ErrClass, "zrem", 1)
			continue
		}
		res.Processed += replies[i].Int
	}
	return res, nil
}

func apiVersion() int {
	if mode == "api1" {
		return 1
	}
	return scannerapi.APIVersion
}

func main() {
	switch {
	case mode == "exit":
		os.Exit(1)
	case mode == "crash":
		crash := make(chan os.Signal, 1)
		signal.Notify(crash, syscall.SIGUSR1)
		go func() {
			<-crash
			os.Exit(3)
		}()
	case mode == "raw99":
		hs := pluginhost.Handshake()
		hs.ProtocolVersion = 99
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  hs,
			VersionedPlugins: map[int]plugin.PluginSet{99: {"scanners": rawPlugin{}}},
			GRPCServer:       plugin.DefaultGRPCServer,
		})
		return
	}
	scannerapi.Serve(&hostwork{})
}

type rawPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (rawPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }
func (rawPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}
