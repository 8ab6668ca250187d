package scannerapi_test

import (
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
	} {
		assert.Equal(t, c.want, scannerapi.MatchKeyPattern(c.pattern, c.key), "%q ~ %q", c.pattern, c.key)
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

func validInfo() scannerapi.Info {
	return scannerapi.Info{
		Name: "scoped", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: time.Second, DefaultBatch: 50,
	}
}
