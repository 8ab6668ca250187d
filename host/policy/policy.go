// Package policy keeps the operator's approval of what each plugin may do.
//
// A plugin's authority is the policy its scanner declares (commands, their
// key scopes, library functions): the callback service enforces it, but a
// plugin writes its own declaration, so a new binary could simply declare
// more. The host therefore records the policy it ran each scanner under
// (the first time on first use, or when the operator approves it) in a file
// only its owner may change, and launches a binary whose policy is wider
// than the recorded one only after the operator approved the new policy
// (`ffscan plugins approve`). A narrower or equal policy needs nothing: the
// approval covers it.
//
// Policies compare by their parts, not by patterns' meaning: a new key
// pattern counts as a widening even when an approved one already covers
// it, so an operator is asked rather than a matcher trusted.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Policy is what a scanner declares it may run, in canonical form.
type Policy struct {
	// Commands maps each declared command to its key patterns, sorted;
	// an empty list is a command without a scope (any ff: key).
	Commands map[string][]string `json:"commands"`
	// Functions are the library functions it may call, sorted.
	Functions []string `json:"functions"`
	// FunctionScopes maps each scoped function to the key patterns of
	// its calls, sorted; a function not in it is unscoped (any ff: key
	// but ff:config:*). Approvals recorded before scopes existed have
	// none: every function unscoped, so any scope a binary now declares
	// is within them.
	FunctionScopes map[string][]string `json:"function_scopes,omitempty"`
}

// FromInfo returns the policy a scanner's Info declares.
func FromInfo(info scannerapi.Info) Policy {
	p := Policy{Commands: map[string][]string{}}
	scopes := map[string][]string{}
	for _, ks := range info.KeyScopes {
		scopes[strings.ToUpper(ks.Command)] = ks.Patterns
	}
	for _, c := range info.Commands {
		c = strings.ToUpper(c)
		pats := slices.Clone(scopes[c])
		slices.Sort(pats)
		p.Commands[c] = slices.Compact(pats)
	}
	p.Functions = slices.Clone(info.Functions)
	slices.Sort(p.Functions)
	p.Functions = slices.Compact(p.Functions)
	for _, fs := range info.FunctionScopes {
		if !slices.Contains(p.Functions, fs.Function) {
			continue
		}
		if p.FunctionScopes == nil {
			p.FunctionScopes = map[string][]string{}
		}
		pats := slices.Clone(fs.Patterns)
		slices.Sort(pats)
		p.FunctionScopes[fs.Function] = slices.Compact(pats)
	}
	return p
}

// Validate checks the policy's sizes against what a scanner may declare
// (scannerapi.MaxKeyPatterns patterns of at most MaxKeyPatternLen bytes
// per scope): a policy comes from a validated Info, or from the
// approvals file, which its owner may have edited.
func (p Policy) Validate() error {
	check := func(what string, pats []string) error {
		if len(pats) > scannerapi.MaxKeyPatterns {
			return fmt.Errorf("%s has %d key patterns; at most %d", what, len(pats), scannerapi.MaxKeyPatterns)
		}
		for _, pat := range pats {
			if len(pat) > scannerapi.MaxKeyPatternLen {
				return fmt.Errorf("%s has a key pattern of %d bytes (%.40q...); at most %d", what, len(pat), pat, scannerapi.MaxKeyPatternLen)
			}
		}
		return nil
	}
	for _, c := range slices.Sorted(maps.Keys(p.Commands)) {
		if err := check(c, p.Commands[c]); err != nil {
			return err
		}
	}
	for _, f := range slices.Sorted(maps.Keys(p.FunctionScopes)) {
		if err := check("FCALL "+f, p.FunctionScopes[f]); err != nil {
			return err
		}
	}
	return nil
}

// isPG reports whether a declared function is a Postgres one (PGCALL):
// those take no keys.
func isPG(f string) bool { return strings.HasPrefix(f, callbacks.PGPrefix) }

// Lines describes the policy for people, one grant per line, sorted:
// "DEL ff:flow:{fp:*}:*:pending_cancels", "HGET (any ff: key)",
// "FCALL ff_mark_lease_expired_if_due writes ff:exec:{fp:*}:*:core ...".
// Unscoped writes are marked; every library function counts as a write
// (the host cannot tell the ones that only read).
func (p Policy) Lines() []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(p.Commands)) {
		pats := p.Commands[c]
		if len(pats) == 0 {
			what := "(any ff: key)"
			if callbacks.Writes(c) {
				what = "(any ff: key: an unscoped write)"
			}
			out = append(out, c+" "+what)
			continue
		}
		out = append(out, c+" "+strings.Join(pats, " "))
	}
	for _, f := range p.Functions {
		pats, scoped := p.FunctionScopes[f]
		switch {
		case isPG(f):
			out = append(out, "FCALL "+f)
		case scoped:
			out = append(out, "FCALL "+f+" writes "+strings.Join(pats, " "))
		default:
			out = append(out, "FCALL "+f+" (any ff: key: an unscoped write)")
		}
	}
	return out
}

// Digest is the sha256 of the policy's canonical text, to name it.
func (p Policy) Digest() string {
	sum := sha256.Sum256([]byte(strings.Join(p.Lines(), "\n")))
	return hex.EncodeToString(sum[:])
}

// UnscopedWrites lists the write commands, and as "FCALL f" the library
// functions, the policy allows on any ff: key.
func (p Policy) UnscopedWrites() []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(p.Commands)) {
		if len(p.Commands[c]) == 0 && callbacks.Writes(c) {
			out = append(out, c)
		}
	}
	for _, f := range p.Functions {
		if _, scoped := p.FunctionScopes[f]; !scoped && !isPG(f) {
			out = append(out, "FCALL "+f)
		}
	}
	return out
}

// Widening lists what proposed grants beyond approved, one line each
// ("+ DEL (any ff: key)", "+ ZREM ff:idx:{fp:*}:x", "+ FCALL f"); empty
// when proposed is within approved.
func Widening(approved, proposed Policy) []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(proposed.Commands)) {
		pats := proposed.Commands[c]
		was, ok := approved.Commands[c]
		switch {
		case !ok && len(pats) == 0:
			out = append(out, fmt.Sprintf("+ %s (any ff: key)", c))
		case !ok:
			out = append(out, fmt.Sprintf("+ %s %s", c, strings.Join(pats, " ")))
		case len(was) == 0:
			// Approved on any key: every scope is within it.
		case len(pats) == 0:
			out = append(out, fmt.Sprintf("+ %s (any ff: key; approved only for %s)", c, strings.Join(was, " ")))
		default:
			for _, pat := range pats {
				if !slices.Contains(was, pat) {
					out = append(out, fmt.Sprintf("+ %s %s", c, pat))
				}
			}
		}
	}
	for _, f := range proposed.Functions {
		pats, scoped := proposed.FunctionScopes[f]
		was, wasScoped := approved.FunctionScopes[f]
		switch {
		case !slices.Contains(approved.Functions, f) && (scoped || isPG(f)):
			out = append(out, strings.TrimSpace("+ FCALL "+f+" "+strings.Join(pats, " ")))
		case !slices.Contains(approved.Functions, f):
			out = append(out, fmt.Sprintf("+ FCALL %s (any ff: key)", f))
		case !wasScoped:
			// Approved on any key: every scope is within it.
		case !scoped:
			out = append(out, fmt.Sprintf("+ FCALL %s (any ff: key; approved only for %s)", f, strings.Join(was, " ")))
		default:
			for _, pat := range pats {
				if !slices.Contains(was, pat) {
					out = append(out, fmt.Sprintf("+ FCALL %s %s", f, pat))
				}
			}
		}
	}
	return out
}
