package scanutil

import (
	"regexp"
	"slices"
	"strings"

	"github.com/ffscan/ffscan/keys"
)

// Placeholder values for ScopePatterns: build a call's keys with them in
// place of the ids, lanes and indexes a real call takes, and each becomes
// a '*' in the patterns. They are chosen never to occur in a real key.
const (
	// AnyLane stands for any lane (it passes keys.ValidateLane).
	AnyLane = "ffscan-scope-any-lane"
	// AnyName stands for any other name in a key: a worker instance, a
	// namespace.
	AnyName = "ffscan-scope-any-name"
	// AnyIndex stands for any attempt index.
	AnyIndex uint32 = 4294967295
)

// AnyUUID stands for any execution, flow, budget, quota, edge or
// waitpoint id. It is a function, not a variable, so no code linked into
// the process can change the placeholder under everyone's patterns.
func AnyUUID() keys.UUID {
	return keys.UUID{0x5c, 0x0f, 0xe5, 0xc0, 0x5c, 0x0f, 0x4e, 0x5c, 0x80, 0x5c, 0x0f, 0xe5, 0xc0, 0x5c, 0x0f, 0xe5}
}

// AnyExecution is an execution id of partition family flow made of
// AnyUUID, for building the keys of an execution's calls.
func AnyExecution() keys.ExecutionID {
	id, err := keys.ExecutionIDIn(keys.Partition{Family: keys.FamilyFlow}, AnyUUID())
	if err != nil {
		panic(err) // partition 0 of the flow family is always valid
	}
	return id
}

// partitionTag is a hash tag of a partition: {fp:N}, {b:N} or {q:N}.
var partitionTag = regexp.MustCompile(`\{(fp|b|q):[0-9]+\}`)

// ScopePatterns turns keys built with placeholder values (AnyUUID,
// AnyLane, AnyName, AnyIndex, AnyExecution, or the caller's own) into
// patterns for a KeyScope or a FunctionScope: every occurrence of a
// placeholder becomes '*', and every partition tag becomes its family's
// tag with '*' ("{fp:*}"). Built with the same key builders as the calls
// they scope, the patterns cannot drift from them. The result is sorted,
// without repeats.
func ScopePatterns(placeholders []string, ks ...string) []string {
	pairs := []string{AnyUUID().String(), "*", AnyLane, "*", AnyName, "*", itoa(AnyIndex), "*"}
	for _, p := range placeholders {
		pairs = append(pairs, p, "*")
	}
	r := strings.NewReplacer(pairs...)
	out := make([]string, 0, len(ks))
	for _, k := range ks {
		k = partitionTag.ReplaceAllString(k, "{$1:*}")
		out = append(out, r.Replace(k))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func itoa(n uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
