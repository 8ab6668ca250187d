package lua

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/lua/topology"
)

// Action says what Ensure did on one node.
type Action string

const (
	// ActionLoaded: no flowfabric library was present; ours was loaded.
	ActionLoaded Action = "loaded"
	// ActionKept: our library at the current build version was present.
	ActionKept Action = "kept"
	// ActionReplaced: our library at another build version was replaced.
	ActionReplaced Action = "replaced"
	// ActionFlowFabric: FlowFabric's own library at contract level 34 was
	// present; it is compatible and stays in place.
	ActionFlowFabric Action = "flowfabric-compatible"
	// ActionForced: an incompatible library was replaced because the
	// operator forced it.
	ActionForced Action = "forced"
)

// NodeResult is the outcome of Ensure on one server node.
type NodeResult struct {
	Node   string // address as the client knows it
	Action Action
	Found  string // what was there before, in words
	// Functions are the functions the node's flowfabric library serves
	// now: ours (Functions), or the ones FlowFabric's own library lists
	// (ActionFlowFabric).
	Functions []string
}

// Options tune the loader.
type Options struct {
	// ForceReplace replaces an incompatible library named flowfabric (one
	// that is neither ours nor FlowFabric's level 34). Off by default: that
	// library belongs to somebody else.
	ForceReplace bool
}

// IncompatibleLibraryError reports a flowfabric library the loader refused
// to replace.
type IncompatibleLibraryError struct {
	Node  string
	Found string
}

func (e *IncompatibleLibraryError) Error() string {
	return fmt.Sprintf("lua: node %s has an incompatible %q library (%s); ffscan needs FlowFabric contract level %s. Replace it deliberately with the force option, or load bin/flowfabric.lua yourself", e.Node, LibraryName, e.Found, ContractVersion)
}

// Library loads our flowfabric library and calls its functions, reloading
// once when the server says a function is missing (e.g. after FUNCTION FLUSH
// or a failover to a node that never had it).
type Library struct {
	client valkey.Client
	opts   Options
	mu     sync.Mutex // serialises (re)loads
	// served is the union of the functions the nodes' libraries serve,
	// as of the last Ensure (nil before: ours).
	served atomic.Pointer[map[string]bool]
	// noWrites are the functions every primary's library flags
	// no-writes, as of the last Ensure (nil before: none).
	noWrites atomic.Pointer[map[string]bool]
}

// Writes reports whether a call of fn may write, by the library's own
// flags as the servers list them: every function but one flagged
// no-writes on every primary (before any Ensure: every function).
func (l *Library) Writes(fn string) bool {
	if m := l.noWrites.Load(); m != nil {
		return !(*m)[fn]
	}
	return true
}

// Serves reports whether fn is a function of the flowfabric library the
// last Ensure loaded or recognised: ours, or, on a node where FlowFabric's
// own library was left in place, one it lists. A function of another
// library loaded on the same server is not. Before any Ensure, the
// library is ours.
func (l *Library) Serves(fn string) bool {
	if m := l.served.Load(); m != nil {
		return (*m)[fn]
	}
	_, ok := slices.BinarySearch(Functions(), fn)
	return ok
}

// New returns a Library bound to a client (single node or cluster).
func New(client valkey.Client, opts Options) *Library {
	return &Library{client: client, opts: opts}
}

// Ensure makes every primary node serve a compatible flowfabric library:
// ours at the current version is kept, ours at another version is replaced,
// none is loaded fresh, FlowFabric's own level-34 library is left in place,
// and anything else is refused unless Options.ForceReplace.
func (l *Library) Ensure(ctx context.Context) ([]NodeResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	nodes := l.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var out []NodeResult
	var serving map[string]bool // read when a node does not answer
	for _, addr := range addrs {
		node := nodes[addr]
		primary, err := isPrimary(ctx, node)
		if err != nil {
			// A node the client still knows (a seed) may be dead and
			// serve nothing any more: only a master that serves slots
			// must have the library.
			if serving == nil {
				ms, terr := topology.Masters(ctx, l.client)
				if terr != nil {
					return out, fmt.Errorf("lua: node %s: ROLE: %w (and the topology is unknown: %v)", addr, err, terr)
				}
				serving = map[string]bool{}
				for _, m := range ms {
					serving[m] = true
				}
			}
			if !serving[addr] {
				continue
			}
			return out, fmt.Errorf("lua: node %s: ROLE: %w", addr, err)
		}
		if !primary {
			continue // replicas receive functions from their primary
		}
		r, err := l.ensureNode(ctx, addr, node)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("lua: no primary node to load the library on")
	}
	served := map[string]bool{}
	for _, r := range out {
		for _, f := range r.Functions {
			served[f] = true
		}
	}
	l.served.Store(&served)
	noWrites, err := l.readOnlyFunctions(ctx, nodes, out)
	if err != nil {
		return out, err
	}
	l.noWrites.Store(&noWrites)
	return out, nil
}

// readOnlyFunctions are the functions flagged no-writes in the library
// of every node in out.
func (l *Library) readOnlyFunctions(ctx context.Context, nodes map[string]valkey.Client, out []NodeResult) (map[string]bool, error) {
	var common map[string]bool
	for _, r := range out {
		flagged, err := noWritesFunctions(ctx, nodes[r.Node])
		if err != nil {
			return nil, fmt.Errorf("lua: node %s: FUNCTION LIST: %w", r.Node, err)
		}
		if common == nil {
			common = flagged
			continue
		}
		for f := range common {
			if !flagged[f] {
				delete(common, f)
			}
		}
	}
	if common == nil {
		common = map[string]bool{}
	}
	return common, nil
}

// noWritesFunctions are the functions of the flowfabric library on node
// that carry the no-writes flag.
func noWritesFunctions(ctx context.Context, node valkey.Client) (map[string]bool, error) {
	libs, err := node.Do(ctx, node.B().FunctionList().Libraryname(LibraryName).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, lib := range libs {
		m, err := lib.AsMap()
		if err != nil {
			return nil, err
		}
		nameMsg, fnsMsg := m["library_name"], m["functions"]
		if name, _ := nameMsg.ToString(); name != LibraryName {
			continue
		}
		list, _ := fnsMsg.ToArray()
		for _, f := range list {
			fm, err := f.AsMap()
			if err != nil {
				return nil, err
			}
			nMsg, flagsMsg := fm["name"], fm["flags"]
			n, _ := nMsg.ToString()
			flags, _ := flagsMsg.AsStrSlice()
			if slices.Contains(flags, "no-writes") {
				out[n] = true
			}
		}
	}
	return out, nil
}

func isPrimary(ctx context.Context, node valkey.Client) (bool, error) {
	role, err := node.Do(ctx, node.B().Role().Build()).ToArray()
	if err != nil {
		return false, err
	}
	if len(role) == 0 {
		return false, errors.New("empty ROLE reply")
	}
	r, err := role[0].ToString()
	if err != nil {
		return false, err
	}
	return r == "master", nil
}

func (l *Library) ensureNode(ctx context.Context, addr string, node valkey.Client) (NodeResult, error) {
	fns, present, err := listLibrary(ctx, node)
	if err != nil {
		return NodeResult{}, fmt.Errorf("lua: node %s: FUNCTION LIST: %w", addr, err)
	}
	if !present {
		if err := load(ctx, node, false); err != nil {
			return NodeResult{}, fmt.Errorf("lua: node %s: load %s: %w", addr, LibraryName, err)
		}
		return l.verified(ctx, addr, node, NodeResult{Node: addr, Action: ActionLoaded, Found: "no library"})
	}
	if fns["ffscan_version"] {
		have, err := callString(ctx, node, "ffscan_version")
		if err != nil {
			return NodeResult{}, fmt.Errorf("lua: node %s: ffscan_version: %w", addr, err)
		}
		if have == Version() {
			return NodeResult{Node: addr, Action: ActionKept, Found: "ffscan build " + have, Functions: Functions()}, nil
		}
		if err := load(ctx, node, true); err != nil {
			return NodeResult{}, fmt.Errorf("lua: node %s: replace ffscan build %s: %w", addr, have, err)
		}
		return l.verified(ctx, addr, node, NodeResult{Node: addr, Action: ActionReplaced, Found: "ffscan build " + have})
	}
	found := "no ff_version function"
	if fns["ff_version"] {
		v, err := callString(ctx, node, "ff_version")
		switch {
		case err != nil:
			found = "ff_version failed: " + err.Error()
		case v == ContractVersion:
			names := make([]string, 0, len(fns))
			for f := range fns {
				names = append(names, f)
			}
			sort.Strings(names)
			return NodeResult{Node: addr, Action: ActionFlowFabric, Found: "FlowFabric library, ff_version " + v, Functions: names}, nil
		default:
			found = fmt.Sprintf("ff_version returned %q", v)
		}
	}
	found += fmt.Sprintf(", %d functions, no ffscan_version", len(fns))
	if !l.opts.ForceReplace {
		return NodeResult{}, &IncompatibleLibraryError{Node: addr, Found: found}
	}
	if err := load(ctx, node, true); err != nil {
		return NodeResult{}, fmt.Errorf("lua: node %s: forced replace: %w", addr, err)
	}
	return l.verified(ctx, addr, node, NodeResult{Node: addr, Action: ActionForced, Found: found})
}

// verified checks the load took: a library another process swapped in
// between would otherwise go unnoticed until the first call.
func (l *Library) verified(ctx context.Context, addr string, node valkey.Client, r NodeResult) (NodeResult, error) {
	have, err := callString(ctx, node, "ffscan_version")
	if err != nil {
		return r, fmt.Errorf("lua: node %s: verify after %s: %w", addr, r.Action, err)
	}
	if have != Version() {
		return r, fmt.Errorf("lua: node %s: after %s ffscan_version is %q, want %q (another process loading concurrently?)", addr, r.Action, have, Version())
	}
	r.Functions = Functions()
	return r, nil
}

// listLibrary returns the function names of the flowfabric library and
// whether it exists. LIBRARYNAME is a pattern, so names are compared exactly.
func listLibrary(ctx context.Context, node valkey.Client) (map[string]bool, bool, error) {
	libs, err := node.Do(ctx, node.B().FunctionList().Libraryname(LibraryName).Build()).ToArray()
	if err != nil {
		return nil, false, err
	}
	for _, lib := range libs {
		m, err := lib.AsMap()
		if err != nil {
			return nil, false, err
		}
		nameMsg := m["library_name"]
		name, _ := nameMsg.ToString()
		if name != LibraryName {
			continue
		}
		fns := map[string]bool{}
		fnMsg := m["functions"]
		list, _ := fnMsg.ToArray()
		for _, f := range list {
			fm, err := f.AsMap()
			if err != nil {
				return nil, false, err
			}
			nMsg := fm["name"]
			n, _ := nMsg.ToString()
			fns[n] = true
		}
		return fns, true, nil
	}
	return nil, false, nil
}

func load(ctx context.Context, node valkey.Client, replace bool) error {
	var cmd valkey.Completed
	if replace {
		cmd = node.B().FunctionLoad().Replace().FunctionCode(Source()).Build()
	} else {
		cmd = node.B().FunctionLoad().FunctionCode(Source()).Build()
	}
	return node.Do(ctx, cmd).Error()
}

func callString(ctx context.Context, node valkey.Client, fn string) (string, error) {
	return node.Do(ctx, node.B().Fcall().Function(fn).Numkeys(0).Build()).ToString()
}

// IsFunctionNotFound reports the server's reply to FCALL of an unknown
// function ("ERR Function not found").
func IsFunctionNotFound(err error) bool {
	var verr *valkey.ValkeyError
	if errors.As(err, &verr) {
		return strings.Contains(strings.ToLower(verr.Error()), "function not found")
	}
	return false
}

// Call is one FCALL of a library function.
type Call struct {
	Function string
	Keys     []string
	Args     []string
}

func (l *Library) build(c Call) valkey.Completed {
	return l.client.B().Fcall().Function(c.Function).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
}

// Do runs one FCALL. If the server answers "function not found" it reloads
// the library (Ensure) once and retries; the failed call ran nothing, so the
// retry cannot apply anything twice.
func (l *Library) Do(ctx context.Context, c Call) valkey.ValkeyResult {
	res := l.client.Do(ctx, l.build(c))
	if !IsFunctionNotFound(res.Error()) {
		return res
	}
	if _, err := l.Ensure(ctx); err != nil {
		return res
	}
	return l.client.Do(ctx, l.build(c))
}

// DoMulti pipelines several FCALLs (valkey-go groups them per node) and
// applies the same reload-once rule to the calls that found no function.
func (l *Library) DoMulti(ctx context.Context, calls ...Call) []valkey.ValkeyResult {
	if len(calls) == 0 {
		return nil
	}
	cmds := make(valkey.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = l.build(c)
	}
	res := l.client.DoMulti(ctx, cmds...)
	var retry []int
	for i, r := range res {
		if IsFunctionNotFound(r.Error()) {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return res
	}
	if _, err := l.Ensure(ctx); err != nil {
		return res
	}
	again := make(valkey.Commands, len(retry))
	for j, i := range retry {
		again[j] = l.build(calls[i])
	}
	for j, r := range l.client.DoMulti(ctx, again...) {
		res[retry[j]] = r
	}
	return res
}

// Client is the underlying valkey-go client.
func (l *Library) Client() valkey.Client { return l.client }
