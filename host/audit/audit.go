// Package audit keeps the trail of what was done: every item a scanner
// acted on (the scanner, its plugin's digest, the command or function,
// the execution or key, the outcome) and every operator action (enable,
// disable, hot swap, approve, reload, resume, shadow or act, canary start,
// promote, abort; with the channel and the admin token's identity).
//
// The trail lives in the store ffscan already uses. On Valkey it is a
// stream per partition, beside the partition's own keys
// (ffscan:audit:{fp:N}, and {b:M}, {q:K}), so that one execution's
// history is read from one stream on one node; operator actions and
// actions on no partition go to ffscan:{ffscan}:audit. Each stream is
// bounded by length at every append (XADD MAXLEN ~) and by age by a
// periodic trim (XTRIM MINID ~). A host with Postgres alone keeps it in
// the table ffscan.audit_entry (postgres.go), bounded as a whole by size
// at every write and by age by the same periodic trim.
//
// Entries reach the store through a Recorder: a bounded queue written in
// batches (a pipeline, or one statement) off the scanners' path. When the queue is full an
// entry is dropped and counted (never blocking a scanner); the count is
// in status and metrics.
package audit

import (
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/host/internal/plaintext"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/keys"
)

// The kinds of entry.
const (
	KindScanner  = "scanner"
	KindOperator = "operator"
)

// The outcomes of a scanner's action.
const (
	// Acted: the write changed the store.
	Acted = "acted"
	// AlreadyDone: the function or command found it done (a function's
	// ALREADY_SATISFIED or DUPLICATE, a plain write that changed nothing).
	AlreadyDone = "already_done"
	// Refused: the function refused (its error reply) or the host did
	// (the command's policy).
	Refused = "refused"
	// Failed: no reply came (transport, timeout).
	Failed = "failed"
)

// The channels of an operator action.
const (
	ChannelConsole   = "console"
	ChannelAPI       = "api"
	ChannelCLI       = "cli"
	ChannelFileWatch = "file_watch"
	ChannelSIGHUP    = "sighup"
	ChannelHost      = "host"
)

// Entry is one record of the trail.
type Entry struct {
	// ID is the stream entry's ID (set when read back); At is its time
	// (the store's clock at the append).
	ID   string    `json:"id,omitempty"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	Host string    `json:"host,omitempty"`

	// An operator's action: what, through which channel, by whom (the
	// admin token's identity, or the peer's address), with the detail.
	Action  string `json:"action,omitempty"`
	Channel string `json:"channel,omitempty"`
	Who     string `json:"who,omitempty"`

	// A scanner's action (and the scanner an operator's action was on).
	Scanner   string `json:"scanner,omitempty"`
	Digest    string `json:"digest,omitempty"`
	Command   string `json:"command,omitempty"`
	Execution string `json:"execution,omitempty"`
	Key       string `json:"key,omitempty"`
	Outcome   string `json:"outcome,omitempty"`
	Detail    string `json:"detail,omitempty"`

	// write is a scanner's write whose key and execution are still to be
	// read from it (RecordWrite): read by the recorder's writer, off the
	// path of the scanner's reply.
	write *shadow.Decision
}

// DigestShown is how much of a plugin's sha256 an entry keeps (hex
// digits): enough to tell its binaries apart, and to match status's.
const DigestShown = 16

// Bounds of an entry's text (the plugin's and the operator's).
const (
	maxField  = 256
	maxDetail = 512
)

// bounded is e as a store keeps it: each text bounded, a scanner's entry
// naming its key only when it names no execution, and its plugin by the
// first 16 hex digits of the digest, so that each entry is a few hundred
// bytes (make bench measures it).
func (e Entry) bounded() Entry {
	if e.Execution != "" && e.Kind == KindScanner {
		e.Key = ""
	}
	if len(e.Digest) > DigestShown {
		e.Digest = e.Digest[:DigestShown]
	}
	for _, f := range []*string{&e.Host, &e.Action, &e.Channel, &e.Who, &e.Scanner, &e.Digest, &e.Command, &e.Execution, &e.Key, &e.Outcome} {
		*f = plaintext.Line(*f, maxField)
	}
	e.Detail = plaintext.Line(e.Detail, maxDetail)
	return e
}

// fields are e (bounded) as stream fields, those set.
// The stream entry's ID carries the time (the server's, at the append),
// so no field does.
func (e Entry) fields() []string {
	out := []string{"kind", e.Kind}
	add := func(k, v string) {
		if v != "" {
			out = append(out, k, v)
		}
	}
	add("host", e.Host)
	add("action", e.Action)
	add("channel", e.Channel)
	add("who", e.Who)
	add("scanner", e.Scanner)
	add("digest", e.Digest)
	add("command", e.Command)
	add("execution", e.Execution)
	add("key", e.Key)
	add("outcome", e.Outcome)
	add("detail", e.Detail)
	return out
}

// entryOf reads an entry back from its stream fields.
func entryOf(id string, f map[string]string) Entry {
	e := Entry{ID: id, Kind: f["kind"], Host: f["host"], Action: f["action"], Channel: f["channel"], Who: f["who"], Scanner: f["scanner"],
		Digest: f["digest"], Command: f["command"], Execution: f["execution"], Key: f["key"], Outcome: f["outcome"], Detail: f["detail"]}
	ms, _, _ := strings.Cut(id, "-")
	if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
		e.At = time.UnixMilli(n)
	}
	return e
}

// ScannerEntry is the record of one write a scanner's plugin sent and
// the host ran: its execution is the one the write's keys (or, for a
// member of an index, its arguments) name.
func ScannerEntry(at time.Time, scanner, digest string, d shadow.Decision, outcome string) Entry {
	e := Entry{At: at, Kind: KindScanner, Scanner: scanner, Digest: digest, Command: d.Command, Outcome: outcome}
	return e.about(d)
}

// about is e with the key and the execution d names.
func (e Entry) about(d shadow.Decision) Entry {
	e.write = nil
	if len(d.Keys) > 0 {
		e.Key = d.Keys[0]
	}
	e.Execution = executionOf(d)
	return e
}

// executionOf is the execution a write is about, if one of its keys is an
// execution's key or one of its arguments an execution's ID (or, for a
// PGCALL, its partition and uuid: pgcall.go).
func executionOf(d shadow.Decision) string {
	for _, k := range d.Keys {
		// ff:exec:{fp:N}:{fp:N}:uuid:..., and ff:attempt:, ff:stream:.
		for _, prefix := range []string{"ff:exec:", "ff:attempt:", "ff:stream:"} {
			if rest, ok := strings.CutPrefix(k, prefix); ok {
				if _, after, ok := strings.Cut(rest, "}:"); ok {
					// The parse accepts the canonical form only, so the
					// text it accepts is the ID as written (no copy).
					if s := firstID(after); validID(s) {
						return s
					}
				}
			}
		}
	}
	for _, a := range d.Args {
		if len(a) > 40 && len(a) < 60 && strings.HasPrefix(a, "{fp:") && validID(a) {
			return a
		}
	}
	return pgExecutionOf(d)
}

// validID says s is an execution ID in its canonical form.
func validID(s string) bool {
	_, err := keys.ParseExecutionID(s)
	return err == nil
}

// firstID cuts "{fp:N}:uuid:rest" to "{fp:N}:uuid".
func firstID(s string) string {
	tag, rest, ok := strings.Cut(s, "}:")
	if !ok {
		return s
	}
	uuid, _, _ := strings.Cut(rest, ":")
	return tag + "}:" + uuid
}

// streamOf is the stream an entry goes to: its partition's (the hash tag
// of its key, or of its execution), else the host-wide one.
func streamOf(e Entry) string {
	for _, s := range []string{e.Key, e.Execution} {
		if tag := hashTag(s); tag != "" {
			return "ffscan:audit:" + tag
		}
	}
	return OperatorStream
}

// OperatorStream holds operator actions and actions on no partition.
const OperatorStream = "ffscan:{ffscan}:audit"

// hashTag is s's partition hash tag ({fp:N}, {b:M}, {q:K}), or "".
func hashTag(s string) string {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(s[i:], '}')
	if j < 0 {
		return ""
	}
	tag := s[i : i+j+1]
	for _, f := range []string{"{fp:", "{b:", "{q:"} {
		if strings.HasPrefix(tag, f) {
			if _, err := strconv.ParseUint(tag[len(f):len(tag)-1], 10, 16); err == nil {
				return tag
			}
		}
	}
	return ""
}

// Outcome classifies a write's reply.
func Outcome(failed, transport bool, status string, integer int64, isInt bool) string {
	switch {
	case transport:
		return Failed
	case failed:
		return Refused
	case status == "ALREADY_SATISFIED" || status == "DUPLICATE":
		return AlreadyDone
	case isInt && integer == 0:
		return AlreadyDone
	}
	return Acted
}
