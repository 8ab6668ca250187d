package scannertest

import (
	"context"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Runner is the scanner host Run drives. The kit does not link a host (a
// plugin author's test would then build all of it); the host side
// implements this small interface instead: ffscan's is
// github.com/ffscan/ffscan/host/hosttest.Runner.
type Runner interface {
	// Boot starts a host on a server with one scanner configured, the
	// flowfabric library loaded. Run closes it.
	Boot(ctx context.Context, b Boot) (BootedHost, error)
}

// Boot is the host configuration Run asks for.
type Boot struct {
	// Scanner is the scanner's name, configured as scanners.<Scanner>
	// with plugin <Scanner>.
	Scanner string
	// Addr is the server (single node).
	Addr string
	// PluginDir holds the plugin binary; empty for linked runs only.
	PluginDir  string
	Options    map[string]string
	Partitions keys.PartitionConfig
	Lanes      []string
	// PostgresDSN is the FlowFabric Postgres database the host serves
	// (Case.PostgresDSN; empty: none), and its filter
	// (Case.PostgresFilter).
	PostgresDSN    string
	PostgresFilter scannerapi.Filter
}

// BootedHost is a running host.
type BootedHost interface {
	// Open prepares the scanner: linked (run in this process through
	// the host's callbacks) when set, else its plugin. observe sees
	// every batch it runs through the host and the replies.
	Open(ctx context.Context, o Open) (Session, error)
	Close()
}

// Open says how to run the scanner.
type Open struct {
	Linked  scannerapi.Scanner
	DryRun  bool
	Observe func(cmds []scannerapi.Command, replies []scannerapi.Reply)
}

// Session runs cycles of one scanner.
type Session interface {
	// Cycle runs one cycle over every partition (partition < 0) or one.
	Cycle(ctx context.Context, partition int) (Cycle, error)
	Close()
}

// Cycle is what one cycle did, as the host's scheduler counts it.
type Cycle struct {
	Scanned, Empty, Failed, Deferred int
	Processed, Skipped               int64
	// Errors by "class/code".
	Errors       map[string]int64
	Backlog      int64
	BacklogKnown bool
	Notes        []string
}
