// Package callbacks is the host side of Host.Exec: the only path from a
// scanner (plugin or linked) to Valkey. It runs a scanner's batch on the
// host's own client, pipelined, after checking every command against what
// the scanner declared in its Info and against the ff: key prefix. Plugins
// never hold credentials, so this check is the whole of their authority.
//
// A refused command does not fail the batch: it gets an error reply of class
// refused and is counted, and the rest of the batch runs. That keeps one bad
// command from hiding the results of the good ones, and makes refusals
// visible in metrics rather than only in a plugin's own logs.
package callbacks

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/keyless"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// MaxBatch bounds one Exec call. Plugins batch per partition; a batch far
// beyond this is a bug that would otherwise pin host memory. It is the
// bound a plugin's batch is decoded under (pluginhost.MaxBatchCommands).
const MaxBatch = pluginhost.MaxBatchCommands

// What one batch's arguments may make the host hold besides the batch
// itself: the commands it builds from them, and what it sends. A plugin's
// batch was decoded under pluginhost's bounds (MaxBatchArgs, and the
// message size, pluginhost.MaxBatchBytes); these hold every scanner,
// linked ones too, to the same, and bound one command further: no
// command of ffscan's scanners comes near them (the widest is an FCALL of
// a few dozen keys and arguments), and a command beyond them is a plugin
// pinning memory or the server's time (an MGET of 100,000 keys).
const (
	// MaxBatchArgs bounds the arguments of one batch (pluginhost's).
	MaxBatchArgs = pluginhost.MaxBatchArgs
	// MaxBatchBytes bounds the bytes of one batch's arguments.
	MaxBatchBytes = pluginhost.MaxBatchBytes
	// MaxCommandArgs bounds one command's arguments: above it the command
	// is refused (argument_bound), the batch's others run.
	MaxCommandArgs = 4096
	// MaxCommandBytes bounds one command's argument bytes.
	MaxCommandBytes = 16 << 20
)

// MaxFCallKeys bounds numkeys of an FCALL; our library's widest function
// takes a few dozen.
const MaxFCallKeys = 256

// MaxKeyLen bounds a key a plugin sends: every key is matched against the
// scanner's scopes, and none of FlowFabric's comes near it.
const MaxKeyLen = 4096

// Refusal reasons, a bounded metric label.
const (
	ReasonUndeclaredCommand  = "undeclared_command"
	ReasonUndeclaredFunction = "undeclared_function"
	ReasonUnknownFunction    = "unknown_function"
	ReasonUnsupported        = "unsupported_command"
	ReasonKeyPrefix          = "key_prefix"
	ReasonKeyLength          = "key_length"
	ReasonBadNumkeys         = "bad_numkeys"
	ReasonArity              = "arity"
	ReasonCrossSlot          = "cross_slot"
	ReasonDryRun             = "dry_run"
	ReasonShadow             = "shadow"
	ReasonProtectedKey       = "protected_key"
	ReasonKeyScope           = "key_scope"
	ReasonNoDatabase         = "no_database"
	ReasonNoValkey           = "no_valkey"
	// ReasonArgBound: a command past MaxCommandArgs or MaxCommandBytes.
	ReasonArgBound = "argument_bound"
	// ReasonUnbounded: a read whose reply the host cannot bound before
	// reading it (reads.go).
	ReasonUnbounded = "reply_unbounded"
)

// Recorder receives the service's counts (host/metrics implements it).
type Recorder interface {
	CallbackCommands(scanner string, n int)
	CallbackRefused(scanner, reason string)
}

type nopRecorder struct{}

func (nopRecorder) CallbackCommands(string, int)   {}
func (nopRecorder) CallbackRefused(string, string) {}

// Policy is what one scanner may run.
type Policy struct {
	commands  map[string]bool
	functions map[string]bool
	// scopes narrows commands to key patterns (Info.KeyScopes).
	scopes map[string]scannerapi.KeyScope
	// fscopes narrows functions to the keys of their calls
	// (Info.FunctionScopes).
	fscopes map[string]scannerapi.FunctionScope
	// readOnly refuses writes and FCALLs (dry runs).
	readOnly bool
	// shadow, when set, holds back every command that would write (a
	// scanner in shadow mode) and records it there.
	shadow *shadow.Log
	// tap, when set, hears of every write that passed the policy, run or
	// held back (a canary comparison, host/canary).
	tap func(shadow.Decision)
	// audit, when set, hears of every write that ran, with its outcome
	// (audit.go).
	audit func(shadow.Decision, string)
}

// WithShadow is p for a scanner in shadow mode: every command that
// passes the policy and would write (a write command, an FCALL of a
// function the library does not flag no-writes, a PGCALL) is recorded in
// log and answered with a "shadow" refusal instead of being run; reads
// run as usual.
func (p Policy) WithShadow(log *shadow.Log) Policy {
	p.shadow = log
	return p
}

// WithTap is p with tap told of every write that passes the policy,
// whether it runs or is held back in shadow mode; it runs on the
// plugin's callback path, so it must be quick.
func (p Policy) WithTap(tap func(shadow.Decision)) Policy {
	p.tap = tap
	return p
}

// PolicyFromInfo builds the policy a scanner declared. Declared commands the
// host does not support are returned so the caller can log them; they will
// be refused when used.
func PolicyFromInfo(info scannerapi.Info, readOnly bool) (Policy, []string) {
	p := Policy{commands: map[string]bool{}, functions: map[string]bool{}, scopes: map[string]scannerapi.KeyScope{},
		fscopes: map[string]scannerapi.FunctionScope{}, readOnly: readOnly}
	for _, ks := range info.KeyScopes {
		p.scopes[strings.ToUpper(ks.Command)] = ks
	}
	for _, fs := range info.FunctionScopes {
		p.fscopes[fs.Function] = fs
	}
	var unsupported []string
	for _, c := range info.Commands {
		c = strings.ToUpper(c)
		if !Supported(c) {
			unsupported = append(unsupported, c)
			continue
		}
		p.commands[c] = true
	}
	for _, f := range info.Functions {
		p.functions[f] = true
	}
	sort.Strings(unsupported)
	return p, unsupported
}

// Service executes scanners' batches.
type Service struct {
	client valkey.Client
	lib    *lua.Library
	rec    Recorder

	mu       sync.RWMutex
	clk      clock.Clock // times the command rate and stragglers
	policies map[string]Policy
	budget   Budget
	spends   map[string]*spend
	pg       *pgxpool.Pool // PGCALLs (nil: none)
	pgFilter scannerapi.Filter
	pgSlots  *postgres.ActionSlots // PGCALL transactions in flight (nil: unbounded)
}

// New returns a service running commands on lib's client. rec may be nil.
// A nil lib is a host without Valkey: only PGCALLs run, every other
// command is refused.
func New(lib *lua.Library, rec Recorder) *Service {
	if rec == nil {
		rec = nopRecorder{}
	}
	s := &Service{lib: lib, rec: rec, clk: clock.Real(), policies: map[string]Policy{}, budget: DefaultBudget, spends: map[string]*spend{}}
	if lib != nil {
		s.client = lib.Client()
	}
	return s
}

// SetBudget sets the budget every scanner gets from now on.
func (s *Service) SetBudget(b Budget) {
	s.mu.Lock()
	s.budget = b
	s.mu.Unlock()
}

// SetClock sets the clock the command rate is measured on (the system
// clock until then).
func (s *Service) SetClock(c clock.Clock) {
	s.mu.Lock()
	s.clk = clock.Or(c)
	s.mu.Unlock()
}

func (s *Service) spendOf(scanner string) (*spend, Budget, clock.Clock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spends[scanner]
	if sp == nil {
		sp = &spend{}
		s.spends[scanner] = sp
	}
	return sp, s.budget, s.clk
}

// Register sets the policy of a scanner (replacing an earlier one, e.g.
// after a plugin restart whose Info changed).
func (s *Service) Register(scanner string, p Policy) {
	s.mu.Lock()
	s.policies[scanner] = p
	s.mu.Unlock()
}

// Unregister removes a scanner's policy; its later calls fail.
func (s *Service) Unregister(scanner string) {
	s.mu.Lock()
	delete(s.policies, scanner)
	s.mu.Unlock()
}

// HostFor binds the service to one scanner as a scannerapi.Host, for
// scanners linked into the host process (tests, benchmarks) and for the
// Host argument of in-process calls.
func (s *Service) HostFor(scanner string) scannerapi.Host { return boundHost{s, scanner} }

type boundHost struct {
	s       *Service
	scanner string
}

func (h boundHost) Exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	return h.s.Exec(ctx, h.scanner, cmds)
}

// op is one checked command: either a refusal, a plain command or an FCALL.
type op struct {
	refused *scannerapi.Reply
	reason  string // refusal reason (metric label)
	plain   valkey.Completed
	isPlain bool
	keyless bool     // TIME, PING: routed with the batch's keys (see route)
	keys    []string // a plain command's keys
	// A plain command's name and arguments after its first key, whether
	// it writes and how large its reply can be (reads.go).
	name  string
	rest  []string
	write bool
	read  readKind
	call  lua.Call
	// pg is a PGCALL (an action function of ffscan's Postgres library).
	pg *pgCall
}

type pgCall struct {
	function string
	args     []string
}

// segment is what kind of pipeline an op goes out in.
func (o op) segment() int {
	switch {
	case o.isPlain:
		return 0
	case o.pg != nil:
		return 2
	default:
		return 1
	}
}

// Exec runs a scanner's batch and returns one reply per command, in order.
// Consecutive plain commands go out as one pipeline and consecutive FCALLs
// as another (through the library, so a missing function triggers one
// reload); keeping the segments in order preserves the batch's ordering,
// which a scanner that reads after it writes relies on. Exec fails as a
// whole only for an unknown scanner, an oversized batch or a context that
// is already done.
func (s *Service) Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	s.mu.RLock()
	pol, ok := s.policies[scanner]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("callbacks: scanner %q is not registered with the host", scanner)
	}
	return s.exec(ctx, scanner, pol, cmds)
}

// Bind returns the service bound to one scanner under a policy of its own,
// outside the registry. Each plugin instance gets one: during a hot swap
// two instances of a scanner run side by side, each under the policy of
// its own Info, and a rollback must not leave the registry pointing at the
// policy of the instance it threw away.
func (s *Service) Bind(scanner string, p Policy) *Bound {
	return &Bound{s: s, scanner: scanner, pol: p}
}

// Bound is a scanner's view of the service under one policy. It is both
// the scannerapi.Host of in-process calls and, through Callbacks, the
// callback service of one plugin process.
type Bound struct {
	s       *Service
	scanner string
	pol     Policy
}

// Exec implements scannerapi.Host.
func (b *Bound) Exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	return b.s.exec(ctx, b.scanner, b.pol, cmds)
}

// Callbacks returns pluginhost.Callbacks for a plugin process: batches of
// the bound scanner run under the bound policy; batches naming another
// scanner are refused as a whole. It is also pluginhost.PackedCallbacks:
// a batch from a plugin's socket is answered straight from the client's
// replies in the packed form.
func (b *Bound) Callbacks() pluginhost.Callbacks { return pluginCallbacks{b} }

type pluginCallbacks struct{ b *Bound }

func (c pluginCallbacks) check(scanner string) error {
	if scanner != c.b.scanner {
		return fmt.Errorf("callbacks: this plugin instance runs scanner %q, not %q", c.b.scanner, scanner)
	}
	return nil
}

// Exec implements pluginhost.Callbacks.
func (c pluginCallbacks) Exec(ctx context.Context, scanner string, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	if err := c.check(scanner); err != nil {
		return nil, err
	}
	return c.b.s.exec(ctx, c.b.scanner, c.b.pol, cmds)
}

// ExecPacked implements pluginhost.PackedCallbacks.
func (c pluginCallbacks) ExecPacked(ctx context.Context, scanner string, cmds []scannerapi.Command, w *pluginhost.ReplyWriter) error {
	if err := c.check(scanner); err != nil {
		return err
	}
	return c.b.s.run(ctx, c.b.scanner, c.b.pol, cmds, &packedOut{w: w})
}

func budgetText(b Budget) string {
	return fmt.Sprintf("at most %d batches in flight, %.0f commands/s", b.MaxInFlight, b.CommandsPerSecond)
}

// route gives the batch's keyless commands a slot and returns the key whose
// slot it is: on a cluster the
// client would send them over any connection, a dead node's too (a seed
// that failed over). They go with the batch's first key, which is the
// partition being scanned, else to the master of keyless.Anchor's slot.
func (s *Service) route(ops []op) string {
	anchor := ""
	for _, o := range ops {
		switch {
		case o.refused != nil || o.keyless:
		case o.isPlain && len(o.keys) > 0:
			anchor = o.keys[0]
		case o.segment() == 1 && len(o.call.Keys) > 0:
			anchor = o.call.Keys[0]
		}
		if anchor != "" {
			break
		}
	}
	if anchor == "" {
		anchor = keyless.Anchor
	}
	for i := range ops {
		if ops[i].keyless && ops[i].refused == nil {
			ops[i].plain = ops[i].plain.SetSlot(anchor)
		}
	}
	return anchor
}

// Refusal texts quote what the plugin sent (a key, a name) and what it
// declared (patterns); both are cut, so that a refusal never repeats a
// plugin's megabytes: 600 refused DELs of long keys once made 57 MB of
// refusal text per batch.
const (
	// maxShown bounds one quoted string of a refusal.
	maxShown = 128
	// maxRefusalText bounds a refusal's whole text.
	maxRefusalText = 1024
)

// refuse builds a refusal: class refused, "refused: <reason>: <text>".
// Every string argument is cut to maxShown bytes, the text to
// maxRefusalText.
func refuse(reason, format string, args ...any) op {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > maxShown {
			args[i] = fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:maxShown], ""), len(s))
		}
	}
	text := fmt.Sprintf(format, args...)
	if len(text) > maxRefusalText {
		text = strings.ToValidUTF8(text[:maxRefusalText], "") + "..."
	}
	return op{reason: reason, refused: &scannerapi.Reply{
		Kind:     scannerapi.KindError,
		Err:      "refused: " + reason + ": " + text,
		ErrClass: scannerapi.ErrRefused,
	}}
}

// patterns lists a scope's patterns in a refusal, the first few (not
// cut like a quoted string: the text's own bound applies).
type patterns []string

func (p patterns) String() string {
	const shown = 8
	if len(p) <= shown {
		return strings.Join(p, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(p[:shown], " "), len(p)-shown)
}

// check validates one command against the policy and builds it; a
// write that passed is told to the tap, and in shadow mode held back and
// recorded.
func (s *Service) check(pol Policy, c scannerapi.Command) op {
	o := s.checkCommand(pol, c)
	if (pol.shadow == nil && pol.tap == nil) || o.refused != nil || !s.writes(o) {
		return o
	}
	d := decision(o)
	if pol.tap != nil {
		pol.tap(d)
	}
	if pol.shadow == nil {
		return o
	}
	pol.shadow.Record(d)
	if o.isPlain {
		// Answered as if it ran, so that the scanner goes on to the
		// writes that follow it (an execution's keys, then its index
		// entries): shadow mode records every write of a decision.
		return op{reason: ReasonShadow, refused: heldReply(o)}
	}
	// A function's reply is its own: the scanner hears that it was held
	// back, which is not the item's failure (the SDK neither backs off
	// nor counts it).
	held := refuse(ReasonShadow, "%s held back: the scanner runs in shadow mode", d.Command)
	held.refused.ErrClass = scannerapi.ErrShadow
	return held
}

// heldReply is the reply to a plain write held back in shadow mode,
// shaped as the command's own: OK for SET and LTRIM, an ID for XADD, a
// score for ZINCRBY, else an integer (the keys named for DEL and UNLINK,
// the members named for the commands that take them, else 1). Nothing
// ran: the values are the plausible ones, not the store's.
func heldReply(o op) *scannerapi.Reply {
	switch o.name {
	case "SET", "LTRIM":
		return &scannerapi.Reply{Kind: scannerapi.KindString, Str: "OK"}
	case "XADD":
		return &scannerapi.Reply{Kind: scannerapi.KindString, Str: "0-0"}
	case "ZINCRBY":
		return &scannerapi.Reply{Kind: scannerapi.KindString, Str: "0"}
	case "DEL", "UNLINK":
		return &scannerapi.Reply{Kind: scannerapi.KindInt, Int: int64(len(o.keys))}
	case "SADD", "SREM", "ZREM", "HDEL", "LPUSH", "RPUSH":
		return &scannerapi.Reply{Kind: scannerapi.KindInt, Int: int64(max(len(o.rest), 1))}
	case "HSET", "ZADD":
		return &scannerapi.Reply{Kind: scannerapi.KindInt, Int: int64(max(len(o.rest)/2, 1))}
	}
	return &scannerapi.Reply{Kind: scannerapi.KindInt, Int: 1}
}

// decision is a checked write as a decision record: the command (FCALL
// and PGCALL with their function), keys and arguments.
func decision(o op) shadow.Decision {
	switch {
	case o.pg != nil:
		return shadow.Decision{Command: "PGCALL " + o.pg.function, Args: o.pg.args}
	case o.isPlain:
		return shadow.Decision{Command: o.name, Keys: o.keys, Args: o.rest}
	default:
		return shadow.Decision{Command: "FCALL " + o.call.Function, Keys: o.call.Keys, Args: o.call.Args}
	}
}

// writes reports whether a checked command may write: a write command,
// a PGCALL (every action function may), an FCALL of a function the
// library does not flag no-writes.
func (s *Service) writes(o op) bool {
	switch {
	case o.pg != nil:
		return true
	case o.isPlain:
		return o.write
	default:
		return s.lib == nil || s.lib.Writes(o.call.Function)
	}
}

// checkCommand validates one command against the policy and builds it.
func (s *Service) checkCommand(pol Policy, c scannerapi.Command) op {
	if len(c) == 0 || c[0] == "" {
		return refuse(ReasonArity, "empty command")
	}
	if bytes := argBytes(c); len(c) > MaxCommandArgs || bytes > MaxCommandBytes {
		return refuse(ReasonArgBound, "%s with %d arguments of %d bytes; a command takes at most %d arguments of %d bytes",
			c[0], len(c), bytes, MaxCommandArgs, MaxCommandBytes)
	}
	name := strings.ToUpper(c[0])
	args := c[1:]
	if name == "PGCALL" {
		return s.checkPGCall(pol, args)
	}
	if s.client == nil {
		return refuse(ReasonNoValkey, "%s: this host has no Valkey (it serves a Postgres database alone)", name)
	}
	if name == "FCALL" {
		return s.checkFCall(pol, args)
	}
	spec, supported := commandTable[name]
	if !pol.commands[name] {
		if !supported {
			return refuse(ReasonUnsupported, "the host does not run %s for plugins", name)
		}
		return refuse(ReasonUndeclaredCommand, "%s is not among the scanner's declared commands", name)
	}
	if spec.write && pol.readOnly {
		return refuse(ReasonDryRun, "%s writes and this is a dry run", name)
	}
	var ks, rest []string
	switch spec.keys {
	case keysFirst:
		if len(args) < 1 {
			return refuse(ReasonArity, "%s needs a key", name)
		}
		ks, rest = args[:1], args[1:]
	case keysAll:
		if len(args) < 1 {
			return refuse(ReasonArity, "%s needs at least one key", name)
		}
		ks = args
	case keysNone:
		rest = args
	}
	if o, bad := checkKeys(ks); bad {
		return o
	}
	if o, bad := checkBounded(name, ks, rest); bad {
		return o
	}
	if scope, ok := pol.scopes[name]; ok {
		for _, k := range ks {
			if !scope.Allows(k) {
				return refuse(ReasonKeyScope, "%s %q: the scanner declared %s only for keys matching %s", name, k, name, patterns(scope.Patterns))
			}
		}
	}
	if spec.write {
		for _, k := range ks {
			if strings.HasPrefix(k, ProtectedPrefix) {
				return refuse(ReasonProtectedKey, "%s %q: %s* is read-only to plugins", name, k, ProtectedPrefix)
			}
		}
	}
	b := s.client.B().Arbitrary(name).Keys(ks...).Args(rest...)
	o := op{isPlain: true, keys: ks, name: name, rest: rest, write: spec.write, read: spec.read}
	switch {
	case spec.keys == keysNone:
		o.plain, o.keyless = b.ReadOnly(), true
	case spec.write:
		o.plain = b.Build()
	default:
		// Read-only commands may be retried by the client on network
		// errors.
		o.plain = b.ReadOnly()
	}
	return o
}

// checkFCall validates an FCALL: a declared function of the flowfabric
// library the host loaded or recognised (never one of another library on
// the same server), outside dry runs, whose keys obey the same rules as a
// write command's: under ff:, on one slot, none under ff:config:, and
// each within the function's declared scope. The host cannot tell which
// functions only read, so every call counts as a write.
func (s *Service) checkFCall(pol Policy, args []string) op {
	if len(args) < 2 {
		return refuse(ReasonArity, "FCALL needs a function name and numkeys")
	}
	fn := args[0]
	if !pol.functions[fn] {
		return refuse(ReasonUndeclaredFunction, "function %q is not among the scanner's declared functions", fn)
	}
	if !s.lib.Serves(fn) {
		return refuse(ReasonUnknownFunction, "function %q is not a function of the %s library the host loaded; plugins call no other library's functions", fn, lua.LibraryName)
	}
	if pol.readOnly {
		return refuse(ReasonDryRun, "FCALL %s and this is a dry run", fn)
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 0 || n > MaxFCallKeys || n > len(args)-2 {
		return refuse(ReasonBadNumkeys, "FCALL %s numkeys %q must be 0..%d and at most the %d arguments that follow", fn, args[1], MaxFCallKeys, len(args)-2)
	}
	ks := args[2 : 2+n]
	if o, bad := checkKeys(ks); bad {
		return o
	}
	for _, k := range ks {
		if strings.HasPrefix(k, ProtectedPrefix) {
			return refuse(ReasonProtectedKey, "FCALL %s with key %q: %s* is read-only to plugins, and a function call counts as a write", fn, k, ProtectedPrefix)
		}
	}
	if scope, ok := pol.fscopes[fn]; ok {
		for _, k := range ks {
			if !scope.Allows(k) {
				return refuse(ReasonKeyScope, "FCALL %s with key %q: the scanner declared %s only for keys matching %s", fn, k, fn, patterns(scope.Patterns))
			}
		}
	}
	return op{call: lua.Call{Function: fn, Keys: ks, Args: args[2+n:]}}
}

// checkPGCall validates a PGCALL: a declared ("pg:<name>") action function
// of ffscan's Postgres library, with its number of arguments, on a host
// with a database, outside dry runs (every action function may write).
func (s *Service) checkPGCall(pol Policy, args []string) op {
	if len(args) < 1 {
		return refuse(ReasonArity, "PGCALL needs a function name")
	}
	fn := args[0]
	if !pol.functions[PGPrefix+fn] {
		return refuse(ReasonUndeclaredFunction, "function %q is not among the scanner's declared functions (a Postgres function is declared as %q)", fn, PGPrefix+fn)
	}
	action, known := postgres.ActionFunctions[fn]
	if !known {
		return refuse(ReasonUnsupported, "%q is not an action function of ffscan's Postgres library", fn)
	}
	if len(args)-1 != action.Args {
		return refuse(ReasonArity, "PGCALL %s takes %d arguments, got %d", fn, action.Args, len(args)-1)
	}
	if pol.readOnly {
		return refuse(ReasonDryRun, "PGCALL %s and this is a dry run", fn)
	}
	s.mu.RLock()
	pg := s.pg
	s.mu.RUnlock()
	if pg == nil {
		return refuse(ReasonNoDatabase, "PGCALL %s: the host has no Postgres database (postgres.dsn)", fn)
	}
	return op{pg: &pgCall{function: fn, args: args[1:]}}
}

// PGPrefix marks a Postgres library function in Info.Functions.
const PGPrefix = "pg:"

// pgConcurrency bounds the PGCALLs of one batch in flight: each is a
// transaction of its own on a connection of the host's pool.
const pgConcurrency = 4

// runPG runs a segment of PGCALLs, a few transactions at a time (each
// unit holding one of the host's action slots, SetActionSlots), and
// writes their replies into out. Calls of a function with a batch form
// (postgres.Action.Batch) on one partition go together, up to
// postgres.MaxBatch, in one statement and one transaction
// (postgres.CallBatch): one commit for a partition's lapses instead of one
// per lapse. A batch that fails is run again call by call, each in its own
// transaction, so that every call gets its own reply; every other call
// runs alone.
func (s *Service) runPG(ctx context.Context, ops []op, out []scannerapi.Reply) {
	s.mu.RLock()
	pg, filter, slots := s.pg, s.pgFilter, s.pgSlots
	s.mu.RUnlock()
	units := pgUnits(ops)
	var wg sync.WaitGroup
	next := make(chan []int)
	for range min(pgConcurrency, len(units)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range next {
				release, err := slots.Acquire(ctx)
				if err != nil {
					for _, k := range u {
						out[k] = pgReply(nil, err)
					}
					continue
				}
				s.runPGUnit(ctx, pg, filter, ops, u, out)
				release()
			}
		}()
	}
	for _, u := range units {
		next <- u
	}
	close(next)
	wg.Wait()
}

// pgUnits groups a segment's PGCALLs into what runs as one transaction:
// the calls of a function with a batch form on one partition, in their
// order, up to postgres.MaxBatch a group, and every other call alone.
func pgUnits(ops []op) [][]int {
	type group struct{ function, partition string }
	var units [][]int
	open := map[group]int{} // the unit a group's next call joins
	for k, o := range ops {
		if postgres.ActionFunctions[o.pg.function].Batch == "" || len(o.pg.args) == 0 {
			units = append(units, []int{k})
			continue
		}
		g := group{o.pg.function, o.pg.args[0]}
		if u, ok := open[g]; ok && len(units[u]) < postgres.MaxBatch {
			units[u] = append(units[u], k)
			continue
		}
		open[g] = len(units)
		units = append(units, []int{k})
	}
	return units
}

// runPGUnit runs one unit of pgUnits.
func (s *Service) runPGUnit(ctx context.Context, pg *pgxpool.Pool, filter scannerapi.Filter, ops []op, u []int, out []scannerapi.Reply) {
	if len(u) > 1 {
		calls := make([][]string, len(u))
		for i, k := range u {
			calls[i] = ops[k].pg.args
		}
		replies, err := postgres.CallBatch(ctx, pg, ops[u[0]].pg.function, calls, filter)
		if err == nil {
			for i, k := range u {
				out[k] = pgReply(replies[i], nil)
			}
			return
		}
		if ctx.Err() != nil {
			for _, k := range u {
				out[k] = pgReply(nil, err)
			}
			return
		}
	}
	for _, k := range u {
		out[k] = pgReply(postgres.Call(ctx, pg, ops[k].pg.function, ops[k].pg.args, filter))
	}
}

// pgReply turns an action function's text[] into a reply in the shape of
// a FlowFabric function's, and an error into an error reply: the
// database's own errors (bad input, a constraint) are class server, a
// failure to reach it transport.
func pgReply(arr []*string, err error) scannerapi.Reply {
	if err != nil {
		class := scannerapi.ErrTransport
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			class = scannerapi.ErrServer
		}
		return scannerapi.Reply{Kind: scannerapi.KindError, Err: err.Error(), ErrClass: class}
	}
	r := scannerapi.Reply{Kind: scannerapi.KindArray, Array: make([]scannerapi.Reply, len(arr))}
	for i, v := range arr {
		if v == nil {
			r.Array[i] = scannerapi.Reply{Kind: scannerapi.KindNil}
			continue
		}
		r.Array[i] = scannerapi.Reply{Kind: scannerapi.KindString, Str: *v}
	}
	return r
}

// SetPostgres gives the service the host's Postgres pool for PGCALLs (nil:
// none, and PGCALLs are refused) and the host's namespace / instance-tag
// filter, which every PGCALL carries to its function.
func (s *Service) SetPostgres(pool *pgxpool.Pool, filter scannerapi.Filter) {
	s.mu.Lock()
	s.pg, s.pgFilter = pool, filter
	s.mu.Unlock()
}

// SetActionSlots bounds the PGCALL transactions in flight to the host's
// action slots, shared with the completion listener's dispatches (nil:
// only pgConcurrency per batch, and the pool, bound them).
func (s *Service) SetActionSlots(slots *postgres.ActionSlots) {
	s.mu.Lock()
	s.pgSlots = slots
	s.mu.Unlock()
}

// ProtectedPrefix starts the deployment's own configuration (the partition
// counts every process must agree on): plugins may read it, never write
// it; one HSET there stops every later host from starting.
const ProtectedPrefix = "ff:config:"

// checkKeys enforces the ff: prefix, and one slot per command: FlowFabric's
// hash tags keep related keys together, and a command spanning slots would
// fail on a cluster (valkey-go even panics building it), so it is refused
// on a single node too rather than working only there.
func checkKeys(ks []string) (op, bool) {
	for _, k := range ks {
		if len(k) > MaxKeyLen {
			return refuse(ReasonKeyLength, "a key of %d bytes (%q); keys are at most %d", len(k), k, MaxKeyLen), true
		}
	}
	for _, k := range ks {
		if !strings.HasPrefix(k, keys.Prefix) {
			return refuse(ReasonKeyPrefix, "key %q is outside the %s prefix", k, keys.Prefix), true
		}
	}
	for _, k := range ks[min(1, len(ks)):] {
		if keys.ClusterSlot(k) != keys.ClusterSlot(ks[0]) {
			return refuse(ReasonCrossSlot, "keys %q and %q hash to different slots", ks[0], k), true
		}
	}
	return op{}, false
}

// argBytes is the bytes of a command's arguments.
func argBytes(c scannerapi.Command) int {
	n := 0
	for _, a := range c {
		n += len(a)
	}
	return n
}

// checkBatch bounds a whole batch's arguments (MaxBatch, MaxBatchArgs,
// MaxBatchBytes): a batch past them fails as a whole, like one of too
// many commands.
func checkBatch(cmds []scannerapi.Command) error {
	if len(cmds) > MaxBatch {
		return fmt.Errorf("callbacks: batch of %d commands exceeds the limit of %d", len(cmds), MaxBatch)
	}
	args, bytes := 0, 0
	for _, c := range cmds {
		args += len(c)
		bytes += argBytes(c)
	}
	if args > MaxBatchArgs || bytes > MaxBatchBytes {
		return fmt.Errorf("callbacks: batch of %d arguments of %d bytes exceeds the limit of %d arguments of %d bytes",
			args, bytes, MaxBatchArgs, MaxBatchBytes)
	}
	return nil
}

// checkBounded refuses the reads whose reply the host cannot bound before
// reading it (reads.go): an MGET of more distinct keys than it probes,
// and a stream's range without COUNT.
func checkBounded(name string, ks, rest []string) (op, bool) {
	switch name {
	case "MGET":
		if uniq, _ := distinct(ks); len(uniq) > maxValueProbes {
			return refuse(ReasonUnbounded, "MGET of %d distinct keys: the host measures at most %d before reading them; split it", len(uniq), maxValueProbes), true
		}
	case "XRANGE", "XREVRANGE":
		if !shapeOf(op{name: name, rest: rest}).counted {
			return refuse(ReasonUnbounded, "%s without COUNT: the host cannot bound a stream's range before reading it; give a COUNT", name), true
		}
	}
	return op{}, false
}
