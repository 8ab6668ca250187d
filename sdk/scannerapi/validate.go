package scannerapi

import (
	"fmt"
	"strings"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/wire"
)

// Bounds of what an Info declares. A host matches every key a plugin
// sends against the patterns the plugin declared, and records the
// declaration in its approvals: the sizes bound that work and that file.
// ffscan's own declarations stay far below them.
const (
	// MaxKeyPatternLen bounds a key pattern and a source's key, in bytes.
	MaxKeyPatternLen = 512
	// MaxKeyPatterns bounds the patterns of one scope.
	MaxKeyPatterns = 64
	// MaxDeclaredNameLen bounds a command or function name, in bytes.
	MaxDeclaredNameLen = 128
)

// ValidateInfo checks that an Info is complete and self-consistent: a valid
// name, a supported APIVersion (pluginhost.MinAPIVersion..APIVersion), a known family, a positive interval and
// batch, well-formed sources (known kinds, keys under "ff:" that contain
// "{p}"), upper-case command names (FCALL goes through Functions) and
// unique, typed options. Serve refuses to serve, and a host
// (pluginhost.Launch) refuses to accept, a scanner whose Info fails it.
func ValidateInfo(in Info) error {
	if err := validateName(in.Name); err != nil {
		return err
	}
	for _, check := range []func(Info) error{validateBasics, validateSources, validateCommands, validateKeyScopes, validateFunctions, validateFunctionScopes, validateOptions} {
		if err := check(in); err != nil {
			return err
		}
	}
	return nil
}

// invalid is an error of the Info of the scanner named name.
func invalid(name, format string, args ...any) error {
	return fmt.Errorf("scanner %s: %s", name, fmt.Sprintf(format, args...))
}

// validateBasics checks the version, family, interval and batch.
func validateBasics(in Info) error {
	if !supportsAPIVersion(in.APIVersion) {
		return invalid(in.Name, "APIVersion is %d; this SDK supports %d to %d (set Info.APIVersion to scannerapi.APIVersion)", in.APIVersion, wire.MinAPIVersion, APIVersion)
	}
	switch in.Family {
	case keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota:
	default:
		return invalid(in.Name, "unknown partition family %d", in.Family)
	}
	if in.DefaultInterval <= 0 {
		return invalid(in.Name, "DefaultInterval must be positive")
	}
	if in.DefaultBatch <= 0 {
		return invalid(in.Name, "DefaultBatch must be positive")
	}
	return nil
}

// validateSources checks each source, and that no two share a name.
func validateSources(in Info) error {
	names := map[string]bool{}
	for i, s := range in.Sources {
		if s.Name == "" {
			return invalid(in.Name, "source %d has no name", i)
		}
		if names[s.Name] {
			return invalid(in.Name, "two sources are named %q", s.Name)
		}
		names[s.Name] = true
		if err := validateSource(in.Name, s); err != nil {
			return err
		}
		if (s.Kind == SourcePostgres) != (in.Sources[0].Kind == SourcePostgres) {
			return invalid(in.Name, "source %s: a scanner's sources are all Postgres sources or none", s.Name)
		}
		switch s.Backlog {
		case BacklogNone, BacklogDue, BacklogSize, BacklogPlugin:
		default:
			return invalid(in.Name, "source %s: unknown backlog mode %q", s.Name, s.Backlog)
		}
	}
	return nil
}

// validateSource checks a source's key for its kind: a Valkey key
// template under "ff:" with {p}, or the candidate function a Postgres
// source names (whose backlog the function's rows count and whose due
// time the function decides).
func validateSource(scanner string, s CandidateSource) error {
	if len(s.Key) > MaxKeyPatternLen {
		return invalid(scanner, "source %s: key of %d bytes; at most %d", s.Name, len(s.Key), MaxKeyPatternLen)
	}
	switch s.Kind {
	case SourceZSetDue, SourceZSetRotate, SourceSetScan:
		if !strings.HasPrefix(s.Key, keys.Prefix) || !strings.Contains(s.Key, "{p}") {
			return invalid(scanner, "source %s: key %q must start with %q and contain {p}", s.Name, s.Key, keys.Prefix)
		}
	case SourcePostgres:
		if !isSQLName(s.Key) {
			return invalid(scanner, "source %s: key %q must name a candidate function of ffscan's Postgres library (lower-case letters, digits, '_')", s.Name, s.Key)
		}
		if s.Backlog != BacklogNone && s.Backlog != BacklogDue {
			return invalid(scanner, "source %s: a Postgres source's backlog is none or due (the rows its candidate function returns), not %q", s.Name, s.Backlog)
		}
		if s.ScoreOffset != 0 {
			return invalid(scanner, "source %s: a Postgres source takes no ScoreOffset (the candidate function decides what is due)", s.Name)
		}
	default:
		return invalid(scanner, "source %s: unknown kind %q", s.Name, s.Kind)
	}
	return nil
}

// validateCommands checks that each command is one upper-case name and
// that no FCALL hides among them.
func validateCommands(in Info) error {
	for _, c := range in.Commands {
		if c == "" || len(c) > MaxDeclaredNameLen || c != strings.ToUpper(c) || strings.ContainsAny(c, " \t") {
			return invalid(in.Name, "command %q must be a single upper-case command name", c)
		}
		if strings.HasPrefix(c, "FCALL") {
			return invalid(in.Name, "command %s: declare library functions in Functions, not FCALL in Commands", c)
		}
	}
	return nil
}

// validateKeyScopes checks that each scope narrows a declared command,
// one scope per command, with patterns under "ff:".
func validateKeyScopes(in Info) error {
	declared := map[string]bool{}
	for _, c := range in.Commands {
		declared[c] = true
	}
	scoped := map[string]bool{}
	for _, ks := range in.KeyScopes {
		if !declared[ks.Command] {
			return invalid(in.Name, "key scope for %q: the command is not among Commands", ks.Command)
		}
		if scoped[ks.Command] {
			return invalid(in.Name, "command %s has two key scopes; list all its patterns in one", ks.Command)
		}
		scoped[ks.Command] = true
		if err := validatePatterns(in.Name, "key scope for "+ks.Command, ks.Patterns); err != nil {
			return err
		}
	}
	return nil
}

// validateFunctions checks the function names.
func validateFunctions(in Info) error {
	for _, f := range in.Functions {
		if f == "" || len(f) > MaxDeclaredNameLen || strings.ContainsAny(f, " \t") {
			return invalid(in.Name, "function name %q is invalid", f)
		}
	}
	return nil
}

// validateFunctionScopes checks that each scope narrows a declared
// library function (not a Postgres one: those take no keys), one scope
// per function, with patterns under "ff:".
func validateFunctionScopes(in Info) error {
	declared := map[string]bool{}
	for _, f := range in.Functions {
		declared[f] = true
	}
	scoped := map[string]bool{}
	for _, fs := range in.FunctionScopes {
		switch {
		case strings.HasPrefix(fs.Function, "pg:"):
			return invalid(in.Name, "function scope for %q: Postgres functions take no keys", fs.Function)
		case !declared[fs.Function]:
			return invalid(in.Name, "function scope for %q: the function is not among Functions", fs.Function)
		case scoped[fs.Function]:
			return invalid(in.Name, "function %s has two scopes; list all its patterns in one", fs.Function)
		}
		scoped[fs.Function] = true
		if err := validatePatterns(in.Name, "function scope for "+fs.Function, fs.Patterns); err != nil {
			return err
		}
	}
	return nil
}

// validatePatterns checks a scope's patterns: at least one, at most
// MaxKeyPatterns, each under "ff:" and at most MaxKeyPatternLen bytes.
func validatePatterns(scanner, what string, pats []string) error {
	switch {
	case len(pats) == 0:
		return invalid(scanner, "%s has no patterns", what)
	case len(pats) > MaxKeyPatterns:
		return invalid(scanner, "%s has %d patterns; at most %d", what, len(pats), MaxKeyPatterns)
	}
	for _, p := range pats {
		if len(p) > MaxKeyPatternLen {
			return invalid(scanner, "%s: a pattern of %d bytes (%.40q...); at most %d", what, len(p), p, MaxKeyPatternLen)
		}
		if !strings.HasPrefix(p, keys.Prefix) {
			return invalid(scanner, "%s: pattern %q must start with %q", what, p, keys.Prefix)
		}
	}
	return nil
}

// validateOptions checks that options are named once each and typed.
func validateOptions(in Info) error {
	opts := map[string]bool{}
	for _, o := range in.Options {
		if o.Name == "" || opts[o.Name] {
			return invalid(in.Name, "option names must be unique and non-empty (got %q)", o.Name)
		}
		opts[o.Name] = true
		switch o.Type {
		case OptionString, OptionInt, OptionBool, OptionDuration:
		default:
			return invalid(in.Name, "option %s: unknown type %q", o.Name, o.Type)
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
