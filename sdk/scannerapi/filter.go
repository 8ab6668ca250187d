package scannerapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/ffscan/ffscan/keys"
)

// Option names of the execution filter, shared by every scanner that
// applies it.
const (
	OptionNamespace   = "namespace"
	OptionInstanceTag = "instance_tag"
)

// Filter restricts a scanner to the executions of one namespace and/or one
// instance tag (FlowFabric's ScannerFilter, scanners.md §6), so several
// deployments can share a keyspace. The zero Filter keeps everything and
// costs no reads.
//
// A candidate is kept only when every configured check positively passes:
// an execution id that does not parse, a read that fails, a missing field
// or a different value all skip it (under-claim rather than touch another
// tenant's execution). Skipped candidates are left where they are.
type Filter struct {
	// Namespace, if set, must equal the core's "namespace" field.
	Namespace string
	// TagKey, if set, names a field of the execution's tags hash that must
	// equal TagValue.
	TagKey string
	// TagValue is the value TagKey must have (may be empty).
	TagValue string
}

// FilterOptions are the OptionSpecs of the filter, for Info.Options.
func FilterOptions() []OptionSpec {
	return []OptionSpec{
		{Name: OptionNamespace, Type: OptionString, Description: "only act on executions of this namespace (empty: all)"},
		{Name: OptionInstanceTag, Type: OptionString, Description: "only act on executions whose tags hash has this key=value (empty: all)"},
	}
}

// ParseFilter reads the filter from a scanner's options: "namespace" and
// "instance_tag" as "key=value" (split at the first '='; the key must not
// be empty, the value may be).
func ParseFilter(options map[string]string) (Filter, error) {
	f := Filter{Namespace: options[OptionNamespace]}
	if tag := options[OptionInstanceTag]; tag != "" {
		k, v, ok := strings.Cut(tag, "=")
		if !ok || k == "" {
			return Filter{}, fmt.Errorf("option %s: %q must be key=value with a non-empty key", OptionInstanceTag, tag)
		}
		f.TagKey, f.TagValue = k, v
	}
	return f, nil
}

// IsNoop reports a filter that keeps everything.
func (f Filter) IsNoop() bool { return f.Namespace == "" && f.TagKey == "" }

// String describes the filter for logs.
func (f Filter) String() string {
	if f.IsNoop() {
		return "none"
	}
	var parts []string
	if f.Namespace != "" {
		parts = append(parts, "namespace="+f.Namespace)
	}
	if f.TagKey != "" {
		parts = append(parts, "tag "+f.TagKey+"="+f.TagValue)
	}
	return strings.Join(parts, ", ")
}

// FilterCommands returns the commands a filtering scanner must declare
// in Info.Commands: a new slice each call, the caller's to keep.
func FilterCommands() []string { return []string{"HGET"} }

// ReadCommands returns the reads that decide one execution: HGET of the
// core's namespace and/or HGET of the tag. None for a no-op filter. Pass
// their replies, in order, to Decide. Scanners that batch the filter with
// other reads use these two; others call Keep.
func (f Filter) ReadCommands(id keys.ExecutionID) []Command {
	k := keys.Exec(id)
	var cmds []Command
	if f.Namespace != "" {
		cmds = append(cmds, Command{"HGET", k.Core(), "namespace"})
	}
	if f.TagKey != "" {
		cmds = append(cmds, Command{"HGET", k.Tags(), f.TagKey})
	}
	return cmds
}

// Decide reads the replies to ReadCommands: true keeps the execution.
func (f Filter) Decide(replies []Reply) bool {
	want := make([]string, 0, 2)
	if f.Namespace != "" {
		want = append(want, f.Namespace)
	}
	if f.TagKey != "" {
		want = append(want, f.TagValue)
	}
	if len(replies) != len(want) {
		return false
	}
	for i, w := range want {
		r := replies[i]
		if r.Failed() || r.Kind != KindString || r.Str != w {
			return false
		}
	}
	return true
}

// Keep decides a batch of candidate execution ids with ONE Exec for all of
// them and returns one verdict per member. A member that is not a valid
// execution id is not kept. An error means the batch could not be read
// (keep none).
func (f Filter) Keep(ctx context.Context, host Host, members []string) ([]bool, error) {
	keep := make([]bool, len(members))
	if f.IsNoop() {
		for i := range keep {
			keep[i] = true
		}
		return keep, nil
	}
	var cmds []Command
	first := make([]int, len(members)) // index of the member's first read, -1 if none
	per := 0
	for i, m := range members {
		id, err := keys.ParseExecutionID(m)
		if err != nil {
			first[i] = -1
			continue
		}
		rc := f.ReadCommands(id)
		per = len(rc)
		first[i] = len(cmds)
		cmds = append(cmds, rc...)
	}
	if len(cmds) == 0 {
		return keep, nil
	}
	replies, err := host.Exec(ctx, cmds)
	if err != nil {
		return nil, fmt.Errorf("filter reads: %w", err)
	}
	if len(replies) != len(cmds) {
		return nil, fmt.Errorf("filter reads: %d replies to %d commands", len(replies), len(cmds))
	}
	for i, at := range first {
		if at >= 0 {
			keep[i] = f.Decide(replies[at : at+per])
		}
	}
	return keep, nil
}
