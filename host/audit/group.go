package audit

import (
	"strings"

	"github.com/ffscan/ffscan/host/internal/plaintext"
)

// A scanner's call acts on many items of one partition with one command
// (lease_expiry marks a batch of leases, retention trims a batch of
// executions). Their entries differ only in the item and the outcome, so
// one stream entry holds them all: the shared fields once and an "items"
// field of one line per action. The store then does one append per call
// and partition instead of one per action; on a drain bound by the
// server's CPU that append was the trail's main cost, and the entry's
// shared fields were most of its memory.

// maxItems bounds the actions one stream entry holds.
const maxItems = 128

// group is the entries of a batch that share one stream entry.
type group struct {
	stream string
	items  []Entry
}

// groups cuts a batch into stream entries, in order: a scanner's entries
// with the same stream, host, scanner, digest and command, up to
// maxItems, share one; every other entry has its own.
func groups(batch []Entry) []group {
	type shared struct{ stream, host, scanner, digest, command string }
	var out []group
	open := map[shared]int{} // index in out
	for _, e := range batch {
		stream := streamOf(e)
		if e.Kind != KindScanner || e.Detail != "" {
			out = append(out, group{stream: stream, items: []Entry{e}})
			continue
		}
		k := shared{stream, e.Host, e.Scanner, e.Digest, e.Command}
		if i, ok := open[k]; ok && len(out[i].items) < maxItems {
			out[i].items = append(out[i].items, e)
			continue
		}
		open[k] = len(out)
		out = append(out, group{stream: stream, items: []Entry{e}})
	}
	return out
}

// fields are g's stream fields: an entry of one action as Entry.fields
// writes it; one of several with the shared fields once and "items",
// a line per action: "OUTCOME x EXECUTION" or "OUTCOME k KEY".
func (g group) fields() []string {
	if len(g.items) == 1 {
		return g.items[0].fields()
	}
	head := g.items[0]
	head.Execution, head.Key, head.Outcome = "", "", ""
	var b strings.Builder
	for i, e := range g.items {
		if i > 0 {
			b.WriteByte('\n')
		}
		// Each part is one line (fields bounds it); the outcome is one
		// of the four words.
		b.WriteString(oneWord(e.Outcome))
		if e.Execution != "" {
			b.WriteString(" x ")
			b.WriteString(bounded(e.Execution))
		} else {
			b.WriteString(" k ")
			b.WriteString(bounded(e.Key))
		}
	}
	return append(head.fields(), "items", b.String())
}

// entriesOf reads a stream entry back: one entry, or one per item.
func entriesOf(id string, f map[string]string) []Entry {
	head := entryOf(id, f)
	items, ok := f["items"]
	if !ok {
		return []Entry{head}
	}
	var out []Entry
	for _, line := range strings.Split(items, "\n") {
		outcome, rest, _ := strings.Cut(line, " ")
		which, target, _ := strings.Cut(rest, " ")
		e := head
		e.Outcome = outcome
		if which == "x" {
			e.Execution = target
		} else {
			e.Key = target
		}
		out = append(out, e)
	}
	return out
}

// oneWord is s with no space or line break (an outcome is one word).
func oneWord(s string) string {
	if s == "" || strings.ContainsAny(s, " \n\r\t") {
		return "unknown"
	}
	return s
}

// bounded is s as one line of at most maxField bytes.
func bounded(s string) string { return plaintext.Line(s, maxField) }
