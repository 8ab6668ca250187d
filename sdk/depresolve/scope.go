package depresolve

import (
	"slices"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// FunctionScopes scope Functions to the keys a Resolver's calls use: a
// scanner that uses it declares them in its scannerapi.Info
// (FunctionScopes) beside Functions. Each call returns a new copy.
func FunctionScopes() []scannerapi.FunctionScope {
	out := make([]scannerapi.FunctionScope, len(scopes))
	for i, s := range scopes {
		out[i] = scannerapi.FunctionScope{Function: s.Function, Patterns: slices.Clone(s.Patterns)}
	}
	return out
}

var scopes = functionScopes()

// functionScopes builds the scopes from the calls themselves, made with
// placeholder ids (scanutil.ScopePatterns): an upstream in the child's
// partition (its result key) and in another one (the partition's noop
// key stands in).
func functionScopes() []scannerapi.FunctionScope {
	child := scanutil.AnyExecution()
	elsewhere, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow, Index: 1}, scanutil.AnyUUID())
	if err != nil {
		panic(err)
	}
	var resolve []string
	for _, up := range []keys.ExecutionID{child, elsewhere} {
		j := job{edge: scanutil.AnyUUID(), flow: keys.FlowIDFrom(scanutil.AnyUUID()), up: up, child: child,
			lane: scanutil.AnyLane, attempt: scanutil.AnyIndex}
		resolve = append(resolve, callKeys(resolveCall(j, "0"))...)
	}
	promote := callKeys(promoteCall(promotion{child: child, lane: scanutil.AnyLane}, "0"))
	return []scannerapi.FunctionScope{
		{Function: functions[0], Patterns: scanutil.ScopePatterns(nil, resolve...)},
		{Function: functions[1], Patterns: scanutil.ScopePatterns(nil, promote...)},
	}
}

func callKeys(c scannerapi.Command) []string {
	_, ks, _, _ := scannerapi.ParseFCall(c)
	return ks
}
