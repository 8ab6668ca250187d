// Package scannerapi is the contract between the ffscan host and scanner
// plugins. A plugin implements Scanner and calls Serve from its main; the
// host launches it as a subprocess (hashicorp/go-plugin over gRPC) or links
// it in-process, and the scanner behaves identically either way.
//
// The contract is shaped by cost: an RPC to a plugin, and every callback
// from the plugin to the host, costs on the order of 150 µs. So the host,
// not the plugin, fetches candidates for every partition each cycle
// (pipelined, from the sources the scanner declares in Info), skips empty
// partitions without calling the plugin, and calls ScanPartition only for
// partitions with work. The plugin then reads more and acts through Host.Exec,
// which carries many commands in one callback and runs them pipelined. A
// well-written scanner costs one RPC plus one or two callbacks per non-empty
// partition and nothing for an empty one.
//
// Plugins never hold Valkey credentials. The host executes only the
// commands and functions a scanner declared in Info, and only on keys under
// the "ff:" prefix; anything else is refused (an error reply for that
// command) and counted.
//
// # Running a scanner
//
// A plugin's main calls Serve with its scanners; that is all a plugin
// binary does. A host starts it with package pluginhost
// (github.com/ffscan/ffscan/sdk/pluginhost), whose Launch drives the
// plugin's scanners over gRPC (hashicorp/go-plugin, protocol version
// APIVersion) and answers their commands; linked into a host,
// pluginhost.Linked runs the same scanner in-process on the same
// callbacks, so both modes run the same code path and report identical
// results. This package holds what a scanner author uses; the host's side
// (launching, confining and killing plugin processes, serving their
// callbacks) is pluginhost's, and a plugin binary does not link it. The
// wire protocol is in proto/scanner.proto.
//
// Process hygiene: a launched plugin runs in its own process group and is
// killed as a group, gets SIGKILL from the kernel when the host dies
// (Pdeathsig, Linux), and inherits only a minimal environment (all of it
// pluginhost's doing); Serve makes the plugin exit by itself when it
// notices its parent is gone.
//
// # Helpers for scanner authors
//
// FCall builds an FCALL; ParseFunctionReply reads a FlowFabric reply
// ({1, status, ...} or {0, code, ...}) and ParseScoredMembers a WITHSCORES
// range; FailureTracker backs off items that keep failing; Filter restricts
// a scanner to a namespace or instance tag with one batched read;
// Logger gives a method its logger. Package scannertest runs a scanner
// linked and as a subprocess against a real server in tests.
package scannerapi

import (
	"context"
	"strings"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/wire"
)

// APIVersion is the newest version of this contract, the one a scanner
// built with this SDK declares (Info.APIVersion = scannerapi.APIVersion).
// The go-plugin handshake carries it: the host offers every version from
// pluginhost.MinAPIVersion to APIVersion, the plugin answers with the version its
// scanners declare, and a plugin outside that range is refused with an
// error that names both sides' versions (pluginhost.APIVersionError).
//
// Version history:
//
//	1  the initial contract.
//	2  Configure may be called again on a running scanner, concurrently with
//	   ScanPartition and SampleBacklog calls in flight (live reload of
//	   options); the new options apply to calls that start after Configure
//	   returned. A version 1 scanner is configured exactly once per process:
//	   the host applies an options change to it by starting a fresh process
//	   and hot-swapping to it.
//
// Additions to the wire protocol that old peers can ignore (new optional
// fields) do not change the version; changes of meaning do.
const APIVersion = 2

// supportsAPIVersion reports whether v is a contract version this SDK
// runs: from the oldest a host still launches (pluginhost.MinAPIVersion)
// to APIVersion.
func supportsAPIVersion(v int) bool { return v >= wire.MinAPIVersion && v <= APIVersion }

// Scanner is what a plugin author implements. Methods may be called
// concurrently for different partitions; implementations must be safe for
// that (state kept across calls, such as a failure tracker, needs a lock).
type Scanner interface {
	// Info describes the scanner. It is called once after launch and must
	// not depend on Configure.
	Info() Info
	// Configure validates and applies the operator's options (from the
	// host config, checked against Info.Options first). It is called before
	// the first scan and (API version 2) again when the configuration is
	// reloaded, possibly while scans are in flight: apply the new options
	// to calls that start afterwards. An error rejects the new options and
	// the old ones must stay in force.
	Configure(ctx context.Context, options map[string]string) error
	// ScanPartition does the work of one partition for one cycle: the host
	// passes the candidates it fetched; the scanner reads and acts through
	// host and reports what it did. An error means the whole call failed
	// (the host counts it and retries the partition next cycle); per-item
	// failures belong in ScanResult.Errors.
	ScanPartition(ctx context.Context, host Host, req *ScanRequest) (*ScanResult, error)
}

// BacklogSampler is implemented by scanners that measure their own
// backlog. Most do not need to: the host counts a source's backlog itself
// (BacklogDue, BacklogSize), and a scanner can report the depth it saw in
// ScanResult.Backlog. A scanner whose sources declare BacklogPlugin and
// that does not implement it reports no backlog between scans.
type BacklogSampler interface {
	// SampleBacklog returns the backlog depth of each given partition, in
	// order. A nil slice means "not measured".
	SampleBacklog(ctx context.Context, host Host, partitions []keys.Partition) ([]int64, error)
}

// Info describes a scanner to the host.
type Info struct {
	// Name is unique per host; it labels metrics and logs and names the
	// scanner in config (scanners.<name>.*). Lowercase letters, digits,
	// '_' and '-'.
	Name string
	// Version is the scanner's own version (free form, e.g. "1.2.0").
	Version string
	// APIVersion is the contract version the scanner was written against:
	// set it to scannerapi.APIVersion. A plugin's scanners must all declare
	// the same version; Serve announces it in the handshake.
	APIVersion int
	// Family selects the partitions the host iterates: flow ({fp:N}),
	// budget ({b:M}) or quota ({q:K}).
	Family keys.Family
	// DefaultInterval is the target period of one full sweep.
	DefaultInterval time.Duration
	// DefaultBatch is the default candidate limit per source per partition.
	DefaultBatch int
	// Sources are fetched by the host for every partition each cycle. A
	// partition where every source is empty gets no ScanPartition call.
	Sources []CandidateSource
	// Commands are the raw Valkey commands the scanner may run through
	// Host.Exec (upper case, e.g. "HMGET", "ZREM"). FCALL is not listed
	// here; functions go in Functions.
	Commands []string
	// Functions are the library functions the scanner may FCALL, and, with
	// a "pg:" prefix, the action functions of ffscan's Postgres library it
	// may PGCALL (e.g. "pg:expire_lapsed_lease").
	Functions []string
	// KeyScopes narrow declared commands to the keys the scanner needs: a
	// command that has a scope may touch only keys matching one of its
	// patterns, so a scanner that removes index entries cannot delete
	// execution records. A command without a scope may touch any key
	// under ff: (except ff:config:*, which no plugin may write); the
	// operator approving a plugin's policy sees such unscoped writes
	// flagged. Scope every write command.
	KeyScopes []KeyScope
	// FunctionScopes narrow declared library functions the same way:
	// every key of an FCALL of a function that has a scope must match one
	// of its patterns. A function without a scope may be called with any
	// key under ff: but ff:config:* (every function counts as a write:
	// the host cannot tell which ones only read). Scope every function
	// (scanutil.ScopePatterns builds patterns from the key builders the
	// calls use). Postgres functions ("pg:...") take no keys and no scope.
	FunctionScopes []FunctionScope
	// Options is the config schema: the options the scanner accepts.
	Options []OptionSpec
}

// KeyScope limits one declared command to keys matching Patterns. In a
// pattern '*' matches any run of characters (none included) and every
// other character stands for itself, hash-tag braces too: e.g.
// "ff:idx:{fp:*}:lease_expiry" or "ff:exec:{fp:*}:*:core".
type KeyScope struct {
	Command  string
	Patterns []string
}

// Allows reports whether key matches one of the scope's patterns.
func (s KeyScope) Allows(key string) bool {
	for _, p := range s.Patterns {
		if ok, _ := matchKeyPattern(p, key); ok {
			return true
		}
	}
	return false
}

// FunctionScope limits one declared library function to calls whose
// keys all match Patterns (written as KeyScope's).
type FunctionScope struct {
	Function string
	Patterns []string
}

// Allows reports whether key matches one of the scope's patterns.
func (s FunctionScope) Allows(key string) bool {
	return KeyScope{Patterns: s.Patterns}.Allows(key)
}

// matchKeyPattern reports whether key matches pattern, where '*' matches
// any run of characters and everything else is literal, and counts the
// steps it took (byte comparisons and table entries), which its test
// bounds.
//
// It runs in time linear in the lengths of both: a host matches every key
// a plugin sends against patterns the plugin declared, and a
// backtracking matcher let a 100 KB pattern against a 300 KB key take 32
// s of the host's CPU. The pattern's literal pieces between stars are
// found left to right, each at its first occurrence after the previous
// one (which is where any match can place it), by a Knuth-Morris-Pratt
// search that never looks at a byte of the key twice.
func matchKeyPattern(pattern, key string) (bool, int) {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return pattern == key, min(len(pattern), len(key))
	}
	last := strings.LastIndexByte(pattern, '*')
	head, tail := pattern[:star], pattern[last+1:]
	steps := len(head) + len(tail)
	if len(key) < len(head)+len(tail) || !strings.HasPrefix(key, head) || !strings.HasSuffix(key, tail) {
		return false, steps
	}
	rest := key[len(head) : len(key)-len(tail)]
	if star == last {
		return true, steps
	}
	for _, piece := range strings.Split(pattern[star+1:last], "*") {
		if piece == "" {
			continue
		}
		at, n := indexKMP(rest, piece)
		steps += n
		if at < 0 {
			return false, steps
		}
		rest = rest[at+len(piece):]
	}
	return true, steps
}

// indexKMP is strings.Index in linear time whatever the input (Go's may
// fall back to Rabin-Karp, quadratic on crafted input), with its steps.
func indexKMP(s, sub string) (int, int) {
	fail := make([]int, len(sub))
	steps := 0
	for i, k := 1, 0; i < len(sub); i++ {
		for k > 0 && sub[i] != sub[k] {
			k = fail[k-1]
			steps++
		}
		if sub[i] == sub[k] {
			k++
		}
		fail[i] = k
		steps++
	}
	for i, k := 0, 0; i < len(s); i++ {
		for k > 0 && s[i] != sub[k] {
			k = fail[k-1]
			steps++
		}
		if s[i] == sub[k] {
			k++
		}
		steps++
		if k == len(sub) {
			return i - len(sub) + 1, steps
		}
	}
	return -1, steps
}

// KeyPattern is the source's key as a KeyScope pattern: the partition
// tag and the lane become wildcards ("ff:idx:{p}:lane:{lane}:delayed" is
// "ff:idx:{*}:lane:*:delayed"), so a scanner can scope the command that
// removes what it consumed to exactly its own sources.
func (s CandidateSource) KeyPattern() string {
	return strings.ReplaceAll(strings.ReplaceAll(s.Key, "{p}", "{*}"), "{lane}", "*")
}

// SourceKind says how the host reads a candidate source.
type SourceKind string

const (
	// SourceZSetDue reads members whose score is at most now+ScoreOffset,
	// lowest score first: ZRANGE key -inf (now+offset) BYSCORE LIMIT 0 batch
	// WITHSCORES. Typical for timer indexes (lease_expiry, cancel_backlog).
	SourceZSetDue SourceKind = "zset_due"
	// SourceZSetRotate reads a window of batch members by rank, advancing
	// a per-partition cursor each cycle and wrapping at the end, so every
	// member is visited over successive cycles and stuck entries at the
	// head never hide newer ones.
	SourceZSetRotate SourceKind = "zset_rotate"
	// SourceSetScan reads a SET with SSCAN, one COUNT-batch step per cycle,
	// keeping the cursor per partition across cycles.
	SourceSetScan SourceKind = "set_scan"
	// SourcePostgres reads a FlowFabric Postgres database: Key names one of
	// the candidate functions of ffscan's Postgres library (for example
	// "lapsed_leases"), which the host runs once per cycle for every
	// partition, batch rows at most each. A candidate's Member is what the
	// function says to act on and its Score a due time in ms. A scanner
	// with Postgres sources has no Valkey sources, runs on a host with
	// postgres.dsn, reads "now" from the database's clock, and acts through
	// PGCALL commands (see Command).
	SourcePostgres SourceKind = "postgres"
)

// UsesPostgres reports whether the scanner works on a FlowFabric Postgres
// database (its candidate sources are SourcePostgres).
func (in Info) UsesPostgres() bool {
	for _, s := range in.Sources {
		if s.Kind == SourcePostgres {
			return true
		}
	}
	return false
}

// BacklogMode says how the host measures a source's backlog gauge.
type BacklogMode string

const (
	// BacklogNone exports no backlog for the source.
	BacklogNone BacklogMode = ""
	// BacklogDue counts members due now (ZCOUNT key -inf now+offset),
	// read in the same pipeline as the candidates. For a Postgres source
	// it counts the rows its candidate function returns (the read's own
	// count; partitions whose read was full are counted again, up to a
	// million each).
	BacklogDue BacklogMode = "due"
	// BacklogSize counts all members (ZCARD / SCARD).
	BacklogSize BacklogMode = "size"
	// BacklogPlugin asks the scanner (SampleBacklog or
	// ScanResult.Backlog).
	BacklogPlugin BacklogMode = "plugin"
)

// CandidateSource is an index the host reads for every partition.
type CandidateSource struct {
	// Name identifies the source in ScanRequest candidates.
	Name string
	// Kind is how the key is read.
	Kind SourceKind
	// Key is a template: "{p}" becomes the partition tag (e.g. {fp:7}),
	// "{lane}" makes the host read one key per known lane. Example:
	// "ff:idx:{p}:lease_expiry", "ff:idx:{p}:lane:{lane}:blocked:dependencies".
	Key string
	// ScoreOffset shifts "now" for SourceZSetDue (e.g. -24h for retention
	// candidates older than a day). Zero means due now.
	ScoreOffset time.Duration
	// Backlog selects the backlog gauge of this source.
	Backlog BacklogMode
}

// OptionSpec declares one configuration option of a scanner.
type OptionSpec struct {
	Name        string     // the option's key under scanners.<name>.options
	Type        OptionType // how the value is validated
	Default     string     // the value used when the operator sets none
	Description string     // one line for docs and the admin view
}

// OptionType is the type of an option value; values travel as strings.
type OptionType string

// Option types.
const (
	OptionString   OptionType = "string"
	OptionInt      OptionType = "int"
	OptionBool     OptionType = "bool"
	OptionDuration OptionType = "duration" // Go syntax: "1500ms", "24h"
)

// ScanRequest is one partition's work for one cycle.
type ScanRequest struct {
	// Scanner is the scanner's name (a binary may serve several).
	Scanner string
	// Partition is the partition to work on.
	Partition keys.Partition
	// NowMs is the Valkey server time in ms, read by the host once per
	// cycle; use it instead of the local clock.
	NowMs int64
	// Cycle counts full sweeps of this scanner since the host started it
	// (per-item backoff counts in cycles).
	Cycle uint64
	// Batch is the effective batch size (config or Info.DefaultBatch).
	Batch int
	// Lanes are the lanes the host knows of, for scanners that need them.
	Lanes []string
	// Candidates are the members fetched from the scanner's sources.
	Candidates []Candidate
	// DryRun asks the scanner to read and decide but not mutate: it must
	// not send writes or FCALLs, and reports what it would have done.
	DryRun bool
	// StoreEpoch changes whenever the host saw a sign that the store may
	// have lost or rewound state: a failed read or clock read (a node
	// failing over, a server restarting), a change of the cluster's
	// topology. Whatever a scanner remembers from earlier reads may then
	// describe writes a promoted replica never received. The SDK drops
	// every scanutil memory of the process when it changes (see
	// OnStoreRewound); a scanner with memory of its own registers there
	// too. 0: a host that does not track it.
	StoreEpoch uint64
}

// Candidate is one member read from a source.
type Candidate struct {
	Source string  // CandidateSource.Name
	Key    string  // the concrete key it was read from
	Lane   string  // the lane, for "{lane}" sources
	Member string  // the member (an execution id, flow id, budget id, ...)
	Score  float64 // the zset score (0 for sets)
}

// ScanResult reports what a ScanPartition call did.
type ScanResult struct {
	// Processed counts items acted on (the scanner's own definition, e.g.
	// leases marked expired).
	Processed int64
	// Skipped counts candidates left alone on purpose (filtered, backed
	// off, not yet due).
	Skipped int64
	// Errors counts per-item failures by class and code.
	Errors []ErrorCount
	// More says the partition still has due work beyond this batch; the
	// host rescans it promptly instead of waiting a full interval.
	More bool
	// Backlog, when HasBacklog, replaces the host's own backlog sample for
	// this partition.
	Backlog    int64
	HasBacklog bool // Backlog is set
	// Settled counts due entries of the partition's sources that the
	// scanner knows are handled and stay in the index for another actor to
	// remove (a lease marked expired waits in lease_expiry for a reclaim).
	// The host leaves them out of the partition's due backlog, so a drain
	// that is done does not look like a stall.
	Settled int64
	// Lag, when HasLag, replaces the host's lag sample for this partition
	// (how long its oldest due candidate has been due, settled or not):
	// how long the oldest due entry the scan found still to be handled had
	// been due at ScanRequest.NowMs, 0 when it found none.
	Lag    time.Duration
	HasLag bool // Lag is set
	// Notes are short human-readable lines for scan-once and dry runs.
	Notes []string
}

// ErrorClass classifies a failure.
type ErrorClass string

// Error classes (a metric label).
const (
	// ErrTransport: the command did not get a reply (connection, timeout,
	// cluster redirect exhaustion). Retried next cycle.
	ErrTransport ErrorClass = "transport"
	// ErrLua: a library function answered {0, code, ...} that the scanner
	// does not treat as done.
	ErrLua ErrorClass = "lua"
	// ErrRefused: the host refused the command (not declared, or a key
	// outside ff:).
	ErrRefused ErrorClass = "refused"
	// ErrServer: a RESP error reply (WRONGTYPE, script runtime error).
	ErrServer ErrorClass = "server"
	// ErrInvalid: data that can never be processed as it is, such as an
	// index member that is not a valid id. Retrying does not help.
	ErrInvalid ErrorClass = "invalid"
	// ErrShadow: the host held a function call (FCALL, PGCALL) back
	// because the scanner runs in shadow mode (it records what the
	// scanner would have done; a held-back plain write is answered as if
	// it ran, so that the writes after it are recorded too). Not the
	// item's failure: FailureTracker does not count it and
	// ScanResult.AddError drops it, so a shadow scanner keeps trying its
	// items as it would act on them.
	ErrShadow ErrorClass = "shadow"
)

// ErrorCount is a number of failures of one class and code.
type ErrorCount struct {
	Class ErrorClass // the failure's class
	Code  string     // Lua code or a short reason; may be empty
	Count int64      // how many
}

// Host is the scanner's only way to Valkey. Exec runs the commands
// pipelined and returns one Reply per command, in order. A refused or failed
// command yields a Reply with Err set; Exec itself fails only when the whole
// batch could not be run (e.g. the host is shutting down).
type Host interface {
	Exec(ctx context.Context, cmds []Command) ([]Reply, error)
}

// HostFunc adapts a function to Host (a test that hands a scanner its
// own Host, for one).
type HostFunc func(ctx context.Context, cmds []Command) ([]Reply, error)

// Exec calls f.
func (f HostFunc) Exec(ctx context.Context, cmds []Command) ([]Reply, error) { return f(ctx, cmds) }

// Command is one Valkey command: its name then its arguments, e.g.
// {"HMGET", key, "lane_id", "namespace"}. Use FCall to build an FCALL.
//
// PGCALL is the Postgres counterpart of FCALL: {"PGCALL", function,
// args...} runs an action function of ffscan's Postgres library (declared
// as "pg:<function>" in Info.Functions) in a transaction of its own, with
// the arguments as text the database converts to the function's
// parameter types. The reply has the shape of a FlowFabric function's:
// an array of strings, "1" or "0" first (ParseFunctionReply reads it). Use
// PGCall to build one.
type Command []string

// PGCall builds a PGCALL of a function of ffscan's Postgres library.
func PGCall(function string, args ...string) Command {
	return append(Command{"PGCALL", function}, args...)
}

// Reply is a Valkey reply in a transport-neutral form.
type Reply struct {
	// Kind is the RESP type of the reply.
	Kind ReplyKind
	// Str holds status, bulk and verbatim strings.
	Str string
	// Int holds integers (and booleans as 0/1).
	Int int64
	// Float holds doubles.
	Float float64
	// Array holds array, set and map elements (maps flattened key, value).
	Array []Reply
	// Err is set when the command failed; ErrClass says how.
	Err      string
	ErrClass ErrorClass // the class of Err
}

// ReplyKind is the RESP type of a Reply.
type ReplyKind uint8

// Reply kinds.
const (
	KindNil ReplyKind = iota
	KindString
	KindInt
	KindFloat
	KindArray
	KindError
)
