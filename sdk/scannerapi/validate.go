package scannerapi

import (
	"fmt"
	"strings"

	"github.com/ffscan/ffscan/keys"
)

// ValidateInfo checks that an Info is complete and self-consistent: a valid
// name, a supported APIVersion (MinAPIVersion..APIVersion), a known family, a positive interval and
// batch, well-formed sources (known kinds, keys under "ff:" that contain
// "{p}"), upper-case command names (FCALL goes through Functions) and
// unique, typed options. Serve refuses to serve, and a host
// (pluginhost.Launch) refuses to accept, a scanner whose Info fails it.
func ValidateInfo(in Info) error {
	if err := validateName(in.Name); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("scanner %s: %s", in.Name, fmt.Sprintf(format, args...))
	}
	if !SupportsAPIVersion(in.APIVersion) {
		return bad("APIVersion is %d; this SDK supports %d to %d (set Info.APIVersion to scannerapi.APIVersion)", in.APIVersion, MinAPIVersion, APIVersion)
	}
	switch in.Family {
	case keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota:
	default:
		return bad("unknown partition family %d", in.Family)
	}
	if in.DefaultInterval <= 0 {
		return bad("DefaultInterval must be positive")
	}
	if in.DefaultBatch <= 0 {
		return bad("DefaultBatch must be positive")
	}
	names := map[string]bool{}
	for i, s := range in.Sources {
		if s.Name == "" {
			return bad("source %d has no name", i)
		}
		if names[s.Name] {
			return bad("two sources are named %q", s.Name)
		}
		names[s.Name] = true
		switch s.Kind {
		case SourceZSetDue, SourceZSetRotate, SourceSetScan:
			if !strings.HasPrefix(s.Key, keys.Prefix) || !strings.Contains(s.Key, "{p}") {
				return bad("source %s: key %q must start with %q and contain {p}", s.Name, s.Key, keys.Prefix)
			}
		case SourcePostgres:
			if !isSQLName(s.Key) {
				return bad("source %s: key %q must name a candidate function of ffscan's Postgres library (lower-case letters, digits, '_')", s.Name, s.Key)
			}
			if s.Backlog != BacklogNone && s.Backlog != BacklogDue {
				return bad("source %s: a Postgres source's backlog is none or due (the rows its candidate function returns), not %q", s.Name, s.Backlog)
			}
			if s.ScoreOffset != 0 {
				return bad("source %s: a Postgres source takes no ScoreOffset (the candidate function decides what is due)", s.Name)
			}
		default:
			return bad("source %s: unknown kind %q", s.Name, s.Kind)
		}
		if (s.Kind == SourcePostgres) != (in.Sources[0].Kind == SourcePostgres) {
			return bad("source %s: a scanner's sources are all Postgres sources or none", s.Name)
		}
		switch s.Backlog {
		case BacklogNone, BacklogDue, BacklogSize, BacklogPlugin:
		default:
			return bad("source %s: unknown backlog mode %q", s.Name, s.Backlog)
		}
	}
	for _, c := range in.Commands {
		if c == "" || c != strings.ToUpper(c) || strings.ContainsAny(c, " \t") {
			return bad("command %q must be a single upper-case command name", c)
		}
		if strings.HasPrefix(c, "FCALL") {
			return bad("command %s: declare library functions in Functions, not FCALL in Commands", c)
		}
	}
	declared := map[string]bool{}
	for _, c := range in.Commands {
		declared[c] = true
	}
	scoped := map[string]bool{}
	for _, ks := range in.KeyScopes {
		if !declared[ks.Command] {
			return bad("key scope for %q: the command is not among Commands", ks.Command)
		}
		if scoped[ks.Command] {
			return bad("command %s has two key scopes; list all its patterns in one", ks.Command)
		}
		scoped[ks.Command] = true
		if len(ks.Patterns) == 0 {
			return bad("key scope for %s has no patterns", ks.Command)
		}
		for _, p := range ks.Patterns {
			if !strings.HasPrefix(p, keys.Prefix) {
				return bad("key scope for %s: pattern %q must start with %q", ks.Command, p, keys.Prefix)
			}
		}
	}
	for _, f := range in.Functions {
		if f == "" || strings.ContainsAny(f, " \t") {
			return bad("function name %q is invalid", f)
		}
	}
	opts := map[string]bool{}
	for _, o := range in.Options {
		if o.Name == "" || opts[o.Name] {
			return bad("option names must be unique and non-empty (got %q)", o.Name)
		}
		opts[o.Name] = true
		switch o.Type {
		case OptionString, OptionInt, OptionBool, OptionDuration:
		default:
			return bad("option %s: unknown type %q", o.Name, o.Type)
		}
	}
	return nil
}

func validateName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("scanner name %q: must be 1 to 64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("scanner name %q: only lower-case letters, digits, '_' and '-' are allowed", name)
		}
	}
	return nil
}

// isSQLName reports whether s is a plain lower-case SQL identifier.
func isSQLName(s string) bool {
	if s == "" || len(s) > 63 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
