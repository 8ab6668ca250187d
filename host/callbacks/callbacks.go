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
	"github.com/ffscan/ffscan/host/spread"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/valkeyreply"
)

// MaxBatch bounds one Exec call. Plugins batch per partition; a batch far
// beyond this is a bug that would otherwise pin host memory.
const MaxBatch = 10000

// MaxFCallKeys bounds numkeys of an FCALL; our library's widest function
// takes a few dozen.
const MaxFCallKeys = 256

// Refusal reasons, a bounded metric label.
const (
	ReasonUndeclaredCommand  = "undeclared_command"
	ReasonUndeclaredFunction = "undeclared_function"
	ReasonUnknownFunction    = "unknown_function"
	ReasonUnsupported        = "unsupported_command"
	ReasonKeyPrefix          = "key_prefix"
	ReasonBadNumkeys         = "bad_numkeys"
	ReasonArity              = "arity"
	ReasonCrossSlot          = "cross_slot"
	ReasonDryRun             = "dry_run"
	ReasonProtectedKey       = "protected_key"
	ReasonKeyScope           = "key_scope"
	ReasonNoDatabase         = "no_database"
	ReasonNoValkey           = "no_valkey"
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
	call    lua.Call
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

// replyOut takes a batch's replies, in order: Reply values (refusals,
// Postgres) or the client's results. Each returns the reply's Size, for
// the reply budget.
type replyOut interface {
	reply(r *scannerapi.Reply) int64
	result(r valkey.ValkeyResult) int64
	// replaceLast replaces the reply just taken (its command ran, but the
	// batch's replies passed the budget).
	replaceLast(r *scannerapi.Reply)
}

// sliceOut collects Reply values (linked scanners, and plugins on the
// unary and gRPC stream paths).
type sliceOut struct{ rs []scannerapi.Reply }

func (o *sliceOut) reply(r *scannerapi.Reply) int64 {
	o.rs = append(o.rs, *r)
	return pluginhost.ReplySize(*r)
}

func (o *sliceOut) result(r valkey.ValkeyResult) int64 {
	rep := valkeyreply.Of(r)
	return o.reply(&rep)
}

func (o *sliceOut) replaceLast(r *scannerapi.Reply) { o.rs[len(o.rs)-1] = *r }

// packedOut writes the replies in the packed form without building Reply
// values for the client's results.
type packedOut struct {
	w    *pluginhost.ReplyWriter
	last pluginhost.ReplyMark
}

func (o *packedOut) reply(r *scannerapi.Reply) int64 {
	o.last = o.w.Mark()
	o.w.Reply(r)
	return pluginhost.ReplySize(*r)
}

func (o *packedOut) result(r valkey.ValkeyResult) int64 {
	o.last = o.w.Mark()
	before := o.w.Size()
	valkeyreply.Write(o.w, r)
	return o.w.Size() - before
}

func (o *packedOut) replaceLast(r *scannerapi.Reply) {
	o.w.Rewind(o.last)
	o.w.Reply(r)
}

func (s *Service) exec(ctx context.Context, scanner string, pol Policy, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	out := &sliceOut{rs: make([]scannerapi.Reply, 0, len(cmds))}
	if err := s.run(ctx, scanner, pol, cmds, out); err != nil {
		return nil, err
	}
	return out.rs, nil
}

// run runs a batch and gives out one reply per command, in order.
func (s *Service) run(ctx context.Context, scanner string, pol Policy, cmds []scannerapi.Command, out replyOut) error {
	if len(cmds) > MaxBatch {
		return fmt.Errorf("callbacks: batch of %d commands exceeds the limit of %d", len(cmds), MaxBatch)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sp, budget, clk := s.spendOf(scanner)
	reason, release := sp.admit(budget, len(cmds), clk.Now())
	if reason != "" {
		s.rec.CallbackRefused(scanner, reason)
		refused := refuse(reason, "the scanner's callback budget is spent (%s); try again later", budgetText(budget)).refused
		for range cmds {
			out.reply(refused)
		}
		return nil
	}
	defer release()
	s.rec.CallbackCommands(scanner, len(cmds))
	ops := make([]op, len(cmds))
	for i, c := range cmds {
		ops[i] = s.check(pol, c)
		if ops[i].refused != nil {
			s.rec.CallbackRefused(scanner, ops[i].reason)
		}
	}
	anchor := s.route(ops)
	var replyBytes int64
	over := false
	// took accounts for a reply of a command that ran: past the reply
	// budget it is dropped.
	took := func(size int64) {
		if budget.MaxReplyBytes <= 0 {
			return
		}
		replyBytes += size
		if replyBytes > budget.MaxReplyBytes {
			out.replaceLast(refuse(ReasonBudgetReply, "the command ran but its reply was dropped: the batch's replies passed %d bytes", budget.MaxReplyBytes).refused)
			s.rec.CallbackRefused(scanner, ReasonBudgetReply)
			over = true
		}
	}
	for i := 0; i < len(ops); {
		if over {
			// Past the reply budget: the rest is not sent.
			out.reply(refuse(ReasonBudgetReply, "not sent: the batch's replies passed %d bytes", budget.MaxReplyBytes).refused)
			s.rec.CallbackRefused(scanner, ReasonBudgetReply)
			i++
			continue
		}
		if ops[i].refused != nil {
			out.reply(ops[i].refused)
			i++
			continue
		}
		j := i
		for j < len(ops) && ops[j].refused == nil && ops[j].segment() == ops[i].segment() &&
			// With a reply budget, plain commands (reads of values of
			// any size) go out in pipelines of replyCheckEvery, so that
			// the budget is checked before more is read.
			(!ops[i].isPlain || budget.MaxReplyBytes <= 0 || j-i < replyCheckEvery) {
			j++
		}
		s.runSegment(ctx, clk, ops[i:j], anchor, out, took)
		i = j
	}
	return nil
}

// runSegment runs one pipeline of a batch (ops of one segment kind) and
// gives out its replies; took accounts for each.
func (s *Service) runSegment(ctx context.Context, clk clock.Clock, ops []op, anchor string, out replyOut, took func(int64)) {
	switch {
	case ops[0].pg != nil:
		replies := make([]scannerapi.Reply, len(ops))
		s.runPG(ctx, ops, replies)
		for k := range replies {
			took(out.reply(&replies[k]))
		}
	case ops[0].isPlain:
		seg := make(valkey.Commands, 0, len(ops))
		slots := make([]int, 0, len(ops))
		for _, o := range ops {
			seg = append(seg, o.plain)
			key := anchor
			if len(o.keys) > 0 {
				key = o.keys[0]
			}
			slots = append(slots, int(keys.ClusterSlot(key)))
		}
		// Per slot on a cluster: a master failing over holds up only the
		// commands of its own slots (a SampleBacklog batch spans every
		// partition).
		for _, r := range spread.DoMulti(ctx, clk, s.client, seg, slots) {
			took(out.result(r))
		}
	default:
		calls := make([]lua.Call, 0, len(ops))
		for _, o := range ops {
			calls = append(calls, o.call)
		}
		for _, r := range s.lib.DoMulti(ctx, calls...) {
			took(out.result(r))
		}
	}
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

func refuse(reason, format string, args ...any) op {
	return op{reason: reason, refused: &scannerapi.Reply{
		Kind:     scannerapi.KindError,
		Err:      "refused: " + reason + ": " + fmt.Sprintf(format, args...),
		ErrClass: scannerapi.ErrRefused,
	}}
}

// check validates one command against the policy and builds it.
func (s *Service) check(pol Policy, c scannerapi.Command) op {
	if len(c) == 0 || c[0] == "" {
		return refuse(ReasonArity, "empty command")
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
	if scope, ok := pol.scopes[name]; ok {
		for _, k := range ks {
			if !scope.Allows(k) {
				return refuse(ReasonKeyScope, "%s %q: the scanner declared %s only for keys matching %s", name, k, name, strings.Join(scope.Patterns, " "))
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
	if spec.keys == keysNone {
		return op{plain: b.ReadOnly(), isPlain: true, keyless: true}
	}
	if spec.write {
		return op{plain: b.Build(), isPlain: true, keys: ks}
	}
	// Read-only commands may be retried by the client on network errors.
	return op{plain: b.ReadOnly(), isPlain: true, keys: ks}
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
				return refuse(ReasonKeyScope, "FCALL %s with key %q: the scanner declared %s only for keys matching %s", fn, k, fn, strings.Join(scope.Patterns, " "))
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

// runPG runs a segment of PGCALLs, each in its own transaction, a few at
// a time, and writes their replies into out.
func (s *Service) runPG(ctx context.Context, ops []op, out []scannerapi.Reply) {
	s.mu.RLock()
	pg, filter := s.pg, s.pgFilter
	s.mu.RUnlock()
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(pgConcurrency, len(ops)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				out[k] = pgReply(postgres.Call(ctx, pg, ops[k].pg.function, ops[k].pg.args, filter))
			}
		}()
	}
	for k := range ops {
		next <- k
	}
	close(next)
	wg.Wait()
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
