// Package policy keeps the operator's approval of what each plugin may do.
//
// A plugin's authority is the policy its scanner declares (commands, their
// key scopes, library functions, and what the host reads on its behalf:
// its partition family, candidate sources and batch size): the callback
// service and the scheduler enforce it, but a
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
// it, so an operator is asked rather than a matcher trusted. What the host
// reads for the scanner (its schedule) has no "narrower": any change of
// family, sources or batch needs the operator.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
	// Schedule is what the host reads on the scanner's behalf. Nil in
	// approvals recorded before it was part of a policy: such an approval
	// covers no schedule (Store.Admit fills it in for the binary that
	// ran under it; any other binary needs the operator).
	Schedule *Schedule `json:"schedule,omitempty"`
}

// Schedule is the part of a policy the host acts on before the plugin
// runs a command: which partitions it iterates, which keys it reads as
// candidates, and how many it hands over per call.
type Schedule struct {
	Family string `json:"family"`
	// Sources are the candidate sources, one canonical line each
	// (SourceLine), sorted.
	Sources []string `json:"sources"`
	// Batch is the declared default batch (0: the host's default).
	Batch int `json:"batch"`
}

// show writes a name, key or pattern the plugin declared so that a line
// of the policy shows it exactly and on one line: as it is when it is
// plain printable ASCII without spaces, quotes or backslashes (every
// bundled plugin's), else Go-quoted in ASCII. The form is one-to-one, so
// the digest of the lines names the declaration.
func show(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.QuoteToASCII(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

func showAll(pats []string) string {
	out := make([]string, len(pats))
	for i, p := range pats {
		out[i] = show(p)
	}
	return strings.Join(out, " ")
}

// SourceLine is a candidate source in canonical form: every field the
// host reads it by.
func SourceLine(s scannerapi.CandidateSource) string {
	line := fmt.Sprintf("%s: %s %s", show(s.Name), show(string(s.Kind)), show(s.Key))
	if s.ScoreOffset != 0 {
		line += " offset " + s.ScoreOffset.String()
	}
	if s.Backlog != "" {
		line += " backlog " + show(string(s.Backlog))
	}
	return line
}

// Equal reports whether two schedules are the same (nil is none).
func (s *Schedule) Equal(o *Schedule) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Family == o.Family && s.Batch == o.Batch && slices.Equal(s.Sources, o.Sources)
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
	sch := &Schedule{Family: info.Family.String(), Batch: info.DefaultBatch, Sources: []string{}}
	for _, src := range info.Sources {
		sch.Sources = append(sch.Sources, SourceLine(src))
	}
	slices.Sort(sch.Sources)
	sch.Sources = slices.Compact(sch.Sources)
	p.Schedule = sch
	return p
}

// MaxSources bounds the sources of a recorded schedule (an approvals
// file its owner edited may hold anything).
const MaxSources = 64

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
	if s := p.Schedule; s != nil {
		if len(s.Sources) > MaxSources {
			return fmt.Errorf("the schedule has %d sources; at most %d", len(s.Sources), MaxSources)
		}
		for _, src := range s.Sources {
			if len(src) > 2*scannerapi.MaxKeyPatternLen {
				return fmt.Errorf("the schedule has a source of %d bytes (%.40q...); at most %d", len(src), src, 2*scannerapi.MaxKeyPatternLen)
			}
		}
		if s.Batch < 0 {
			return fmt.Errorf("the schedule has batch %d", s.Batch)
		}
	}
	return nil
}

// isPG reports whether a declared function is a Postgres one (PGCALL):
// those take no keys.
func isPG(f string) bool { return strings.HasPrefix(f, callbacks.PGPrefix) }

// Lines describes the policy for people, one grant per line, sorted:
// "DEL ff:flow:{fp:*}:*:pending_cancels", "HGET (any ff: key)",
// "FCALL ff_mark_lease_expired_if_due writes ff:exec:{fp:*}:*:core ...",
// then the schedule: "FAMILY flow", "SOURCE due: zset_due ff:idx:{p}:x
// backlog due", "BATCH 50". Unscoped writes are marked; every library
// function counts as a write (the host cannot tell the ones that only
// read).
func (p Policy) Lines() []string {
	out := p.grantLines()
	if s := p.Schedule; s != nil {
		out = append(out, s.Lines()...)
	}
	return out
}

// Lines describes the schedule, one line per part.
func (s *Schedule) Lines() []string {
	out := []string{"FAMILY " + show(s.Family)}
	for _, src := range s.Sources {
		out = append(out, "SOURCE "+src)
	}
	batch := strconv.Itoa(s.Batch)
	if s.Batch == 0 {
		batch = "0 (the host's default)"
	}
	return append(out, "BATCH "+batch)
}

func (p Policy) grantLines() []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(p.Commands)) {
		pats := p.Commands[c]
		if len(pats) == 0 {
			what := "(any ff: key)"
			if callbacks.Writes(c) {
				what = "(any ff: key: an unscoped write)"
			}
			out = append(out, show(c)+" "+what)
			continue
		}
		out = append(out, show(c)+" "+showAll(pats))
	}
	for _, f := range p.Functions {
		pats, scoped := p.FunctionScopes[f]
		switch {
		case isPG(f):
			out = append(out, "FCALL "+show(f))
		case scoped:
			out = append(out, "FCALL "+show(f)+" writes "+showAll(pats))
		default:
			out = append(out, "FCALL "+show(f)+" (any ff: key: an unscoped write)")
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
// ("+ DEL (any ff: key)", "+ ZREM ff:idx:{fp:*}:x", "+ FCALL f"), and
// every difference of schedule ("~ BATCH 500 (approved: 50)", "+ SOURCE
// ...", "- SOURCE ..."); empty when proposed is within approved.
func Widening(approved, proposed Policy) []string {
	out := grantWidening(approved, proposed)
	return append(out, scheduleChanges(approved.Schedule, proposed.Schedule)...)
}

// scheduleChanges lists how proposed's schedule differs from approved's.
func scheduleChanges(approved, proposed *Schedule) []string {
	if proposed == nil || approved.Equal(proposed) {
		return nil
	}
	if approved == nil {
		out := []string{}
		for _, l := range proposed.Lines() {
			out = append(out, "+ "+l+" (the approval predates sources and batch)")
		}
		return out
	}
	var out []string
	if approved.Family != proposed.Family {
		out = append(out, fmt.Sprintf("~ FAMILY %s (approved: %s)", proposed.Family, approved.Family))
	}
	for _, src := range proposed.Sources {
		if !slices.Contains(approved.Sources, src) {
			out = append(out, "+ SOURCE "+src)
		}
	}
	for _, src := range approved.Sources {
		if !slices.Contains(proposed.Sources, src) {
			out = append(out, "- SOURCE "+src)
		}
	}
	if approved.Batch != proposed.Batch {
		out = append(out, fmt.Sprintf("~ BATCH %d (approved: %d)", proposed.Batch, approved.Batch))
	}
	return out
}

func grantWidening(approved, proposed Policy) []string {
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
