package scannerapi_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func TestValidateInfo(t *testing.T) {
	good := func() scannerapi.Info {
		return scannerapi.Info{
			Name: "lease_expiry", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
			DefaultInterval: time.Second, DefaultBatch: 50,
			Sources:   []scannerapi.CandidateSource{{Name: "due", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:lease_expiry", Backlog: scannerapi.BacklogDue}},
			Commands:  []string{"HGET", "ZRANGE"},
			Functions: []string{"ff_mark_lease_expired_if_due"},
			Options:   scannerapi.FilterOptions(),
		}
	}
	assert.NoError(t, scannerapi.ValidateInfo(good()))
	for name, mutate := range map[string]func(*scannerapi.Info){
		"bad name":       func(i *scannerapi.Info) { i.Name = "Lease Expiry" },
		"empty name":     func(i *scannerapi.Info) { i.Name = "" },
		"api version":    func(i *scannerapi.Info) { i.APIVersion = 0 },
		"family":         func(i *scannerapi.Info) { i.Family = 0 },
		"interval":       func(i *scannerapi.Info) { i.DefaultInterval = 0 },
		"batch":          func(i *scannerapi.Info) { i.DefaultBatch = 0 },
		"source kind":    func(i *scannerapi.Info) { i.Sources[0].Kind = "list" },
		"source key":     func(i *scannerapi.Info) { i.Sources[0].Key = "idx:{p}:x" },
		"source no {p}":  func(i *scannerapi.Info) { i.Sources[0].Key = "ff:idx:x" },
		"backlog":        func(i *scannerapi.Info) { i.Sources[0].Backlog = "all" },
		"dup source":     func(i *scannerapi.Info) { i.Sources = append(i.Sources, i.Sources[0]) },
		"lower command":  func(i *scannerapi.Info) { i.Commands = []string{"hget"} },
		"fcall command":  func(i *scannerapi.Info) { i.Commands = []string{"FCALL"} },
		"dup option":     func(i *scannerapi.Info) { i.Options = append(i.Options, i.Options[0]) },
		"option type":    func(i *scannerapi.Info) { i.Options[0].Type = "float" },
		"empty function": func(i *scannerapi.Info) { i.Functions = []string{""} },
	} {
		in := good()
		mutate(&in)
		assert.Error(t, scannerapi.ValidateInfo(in), name)
	}
}

func TestValidateInfoPostgresSources(t *testing.T) {
	good := func() scannerapi.Info {
		return scannerapi.Info{
			Name: "pg_attempt_timeout", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
			DefaultInterval: time.Second, DefaultBatch: 1000,
			Sources:   []scannerapi.CandidateSource{{Name: "lapsed", Kind: scannerapi.SourcePostgres, Key: "lapsed_leases"}},
			Functions: []string{"pg:expire_lapsed_lease"},
		}
	}
	require.NoError(t, scannerapi.ValidateInfo(good()))
	assert.True(t, good().UsesPostgres())
	due := good()
	due.Sources[0].Backlog = scannerapi.BacklogDue
	require.NoError(t, scannerapi.ValidateInfo(due), "the due backlog: the rows the candidate function returns")
	for name, mutate := range map[string]func(*scannerapi.Info){
		"function name":  func(i *scannerapi.Info) { i.Sources[0].Key = "ffscan.lapsed_leases" },
		"quoted":         func(i *scannerapi.Info) { i.Sources[0].Key = `lapsed"; DROP` },
		"empty":          func(i *scannerapi.Info) { i.Sources[0].Key = "" },
		"size backlog":   func(i *scannerapi.Info) { i.Sources[0].Backlog = scannerapi.BacklogSize },
		"plugin backlog": func(i *scannerapi.Info) { i.Sources[0].Backlog = scannerapi.BacklogPlugin },
		"score offset":   func(i *scannerapi.Info) { i.Sources[0].ScoreOffset = time.Second },
		"mixed with zset": func(i *scannerapi.Info) {
			i.Sources = append(i.Sources, scannerapi.CandidateSource{Name: "z", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:x"})
		},
	} {
		in := good()
		mutate(&in)
		assert.Error(t, scannerapi.ValidateInfo(in), name)
	}
}

func TestMatchKeyPattern(t *testing.T) {
	for _, c := range []struct {
		pattern, key string
		want         bool
	}{
		{"ff:idx:{fp:*}:lease_expiry", "ff:idx:{fp:12}:lease_expiry", true},
		{"ff:idx:{fp:*}:lease_expiry", "ff:idx:{fp:12}:lease_expiry:x", false},
		{"ff:exec:{fp:*}:*:core", "ff:exec:{fp:1}:abc:def:core", true},
		{"ff:exec:{fp:*}:*:core", "ff:exec:{fp:1}:abc:corex", false},
		{"ff:*", "ff:", true},
		{"ff:a*b*c", "ff:aXbYbZc", true},
		{"ff:a*b*c", "ff:aXbYbZ", false},
		{"ff:exact", "ff:exact", true},
		{"ff:exact", "ff:exac", false},
		{"ff:[a]?", "ff:[a]?", true}, // no other wildcards
		{"ff:[a]?", "ff:a1", false},
		{"ff:*a*", "ff:", false},
		{"ff:**", "ff:x", true},
		{"*", "", true},
		{"ff:ab*ab", "ff:ab", false}, // head and tail may not overlap
		{"ff:*aab*", "ff:aaab", true},
		{"ff:*abab*c", "ff:ababac", true},
		{"ff:*abab*c", "ff:abac", false},
		{"ff:*abab*c", "ff:abababc", true},
	} {
		assert.Equal(t, c.want, scannerapi.MatchKeyPattern(c.pattern, c.key), "%q ~ %q", c.pattern, c.key)
	}
}

// The matcher agrees with a regular expression of the pattern on every
// pattern and key over a small alphabet.
func TestMatchKeyPatternAgreesWithARegexp(t *testing.T) {
	alphabet := []string{"a", "b", "*"}
	var gen func(n int) []string
	gen = func(n int) []string {
		if n == 0 {
			return []string{""}
		}
		var out []string
		for _, p := range gen(n - 1) {
			for _, c := range alphabet {
				out = append(out, p+c)
			}
		}
		return out
	}
	var pats, ks []string
	for n := 0; n <= 5; n++ {
		pats = append(pats, gen(n)...)
	}
	for _, k := range pats {
		if !strings.Contains(k, "*") && len(k) <= 5 {
			ks = append(ks, k)
		}
	}
	for _, p := range pats {
		re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(p), `\*`, ".*") + "$")
		for _, k := range ks {
			require.Equal(t, re.MatchString(k), scannerapi.MatchKeyPattern(p, k), "%q ~ %q", p, k)
		}
	}
}

// The check of a 100 KB pattern against a 300 KB key, which took 32 s of
// a host's CPU in a backtracking matcher, takes a number of steps linear
// in their lengths, whatever their shape.
func TestMatchKeyPatternIsLinear(t *testing.T) {
	cases := []struct{ name, pattern, key string }{
		{"stars between single bytes", "ff:" + strings.Repeat("*a", 50_000) + "*b",
			"ff:" + strings.Repeat("a", 49_999) + strings.Repeat("c", 250_000) + "b"},
		{"a long piece almost found everywhere", "ff:*" + strings.Repeat("a", 99_996) + "b*", "ff:" + strings.Repeat("a", 299_997)},
		{"many pieces, the last missing", "ff:" + strings.Repeat("*ab", 33_332) + "*c*", "ff:" + strings.Repeat("ab", 149_998)},
	}
	for _, c := range cases {
		require.GreaterOrEqual(t, len(c.pattern), 100_000, c.name)
		require.GreaterOrEqual(t, len(c.key), 299_999, c.name)
		ok, steps := scannerapi.MatchKeyPatternSteps(c.pattern, c.key)
		assert.False(t, ok, c.name)
		bound := 4 * (len(c.pattern) + len(c.key))
		assert.LessOrEqual(t, steps, bound, "%s: %d steps for %d + %d bytes", c.name, steps, len(c.pattern), len(c.key))
		t.Logf("%s: %d steps for a %d-byte pattern and a %d-byte key", c.name, steps, len(c.pattern), len(c.key))
	}
}

func TestKeyScopesValidated(t *testing.T) {
	base := func() scannerapi.Info {
		in := validInfo()
		in.Commands = []string{"DEL", "HGET"}
		return in
	}
	for _, c := range []struct {
		scopes []scannerapi.KeyScope
		want   string
	}{
		{[]scannerapi.KeyScope{{Command: "ZREM", Patterns: []string{"ff:x"}}}, "not among Commands"},
		{[]scannerapi.KeyScope{{Command: "DEL"}}, "no patterns"},
		{[]scannerapi.KeyScope{{Command: "DEL", Patterns: []string{"other:x"}}}, "must start with"},
		{[]scannerapi.KeyScope{{Command: "DEL", Patterns: []string{"ff:a"}}, {Command: "DEL", Patterns: []string{"ff:b"}}}, "two key scopes"},
	} {
		in := base()
		in.KeyScopes = c.scopes
		err := scannerapi.ValidateInfo(in)
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
	}
	in := base()
	in.KeyScopes = []scannerapi.KeyScope{{Command: "DEL", Patterns: []string{"ff:a:*", "ff:b"}}}
	require.NoError(t, scannerapi.ValidateInfo(in))
}

func TestFunctionScopesValidated(t *testing.T) {
	base := func() scannerapi.Info {
		in := validInfo()
		in.Functions = []string{"ff_promote_delayed", "pg:expire_lapsed_lease"}
		return in
	}
	for _, c := range []struct {
		scopes []scannerapi.FunctionScope
		want   string
	}{
		{[]scannerapi.FunctionScope{{Function: "ff_other", Patterns: []string{"ff:x"}}}, "not among Functions"},
		{[]scannerapi.FunctionScope{{Function: "ff_promote_delayed"}}, "no patterns"},
		{[]scannerapi.FunctionScope{{Function: "ff_promote_delayed", Patterns: []string{"other:x"}}}, "must start with"},
		{[]scannerapi.FunctionScope{{Function: "ff_promote_delayed", Patterns: []string{"ff:a"}}, {Function: "ff_promote_delayed", Patterns: []string{"ff:b"}}}, "two scopes"},
		{[]scannerapi.FunctionScope{{Function: "pg:expire_lapsed_lease", Patterns: []string{"ff:a"}}}, "Postgres functions take no keys"},
	} {
		in := base()
		in.FunctionScopes = c.scopes
		err := scannerapi.ValidateInfo(in)
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
	}
	in := base()
	in.FunctionScopes = []scannerapi.FunctionScope{{Function: "ff_promote_delayed", Patterns: []string{"ff:exec:{fp:*}:*", "ff:idx:{fp:*}:lane:*:delayed"}}}
	require.NoError(t, scannerapi.ValidateInfo(in))
	assert.True(t, in.FunctionScopes[0].Allows("ff:idx:{fp:3}:lane:default:delayed"))
	assert.False(t, in.FunctionScopes[0].Allows("ff:config:partitions"))
}

// A declaration's patterns, source keys and names are bounded: the host
// matches every key a plugin sends against its patterns.
func TestDeclarationSizesBounded(t *testing.T) {
	long := "ff:" + strings.Repeat("*a", 50_000)
	many := make([]string, scannerapi.MaxKeyPatterns+1)
	for i := range many {
		many[i] = "ff:x"
	}
	for _, c := range []struct {
		mutate func(*scannerapi.Info)
		want   string
	}{
		{func(in *scannerapi.Info) {
			in.KeyScopes = []scannerapi.KeyScope{{Command: "DEL", Patterns: []string{long}}}
		}, "a pattern of 100003 bytes"},
		{func(in *scannerapi.Info) { in.KeyScopes = []scannerapi.KeyScope{{Command: "DEL", Patterns: many}} }, "has 65 patterns; at most 64"},
		{func(in *scannerapi.Info) {
			in.FunctionScopes = []scannerapi.FunctionScope{{Function: "ff_promote_delayed", Patterns: []string{long}}}
		}, "function scope for ff_promote_delayed: a pattern of 100003 bytes"},
		{func(in *scannerapi.Info) {
			in.Sources = []scannerapi.CandidateSource{{Name: "s", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:" + strings.Repeat("x", 600)}}
		}, "key of 611 bytes"},
		{func(in *scannerapi.Info) { in.Functions = append(in.Functions, "ff_"+strings.Repeat("x", 200)) }, "function name"},
	} {
		in := validInfo()
		in.Commands = []string{"DEL"}
		in.Functions = []string{"ff_promote_delayed"}
		c.mutate(&in)
		err := scannerapi.ValidateInfo(in)
		require.Error(t, err, c.want)
		assert.Contains(t, err.Error(), c.want)
		assert.Less(t, len(err.Error()), 300, "the error does not repeat the pattern")
	}
}

func validInfo() scannerapi.Info {
	return scannerapi.Info{
		Name: "scoped", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: time.Second, DefaultBatch: 50,
	}
}
