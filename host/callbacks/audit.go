package callbacks

// This file is the audit of a scanner's writes: each write that passed
// the policy and ran is told, with its outcome read from its reply, to
// the policy's audit function (host/audit records it).

import (
	"errors"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// WithAudit is p with every write that runs told to fn with its outcome
// (audit.Acted, AlreadyDone, Refused, Failed). Writes held back in
// shadow mode and commands the policy refuses are not actions.
func (p Policy) WithAudit(fn func(d shadow.Decision, outcome string)) Policy {
	p.audit = fn
	return p
}

// auditOut passes a batch's replies on and tells the audit function the
// outcome of each write that ran; it counts replies to know which
// command each is for (every command gets exactly one).
type auditOut struct {
	inner replyOut
	ops   []op
	audit []bool // audit[i]: ops[i] is a write that runs
	fn    func(shadow.Decision, string)
	i     int
}

// audited wraps out when pol audits and the batch holds a write that
// runs.
func (s *Service) audited(out replyOut, pol Policy, ops []op) replyOut {
	if pol.audit == nil {
		return out
	}
	ao := &auditOut{inner: out, ops: ops, audit: make([]bool, len(ops)), fn: pol.audit}
	any := false
	for i, o := range ops {
		if o.refused == nil && s.writes(o) {
			ao.audit[i], any = true, true
		}
	}
	if !any {
		return out
	}
	return ao
}

func (o *auditOut) next(outcome func() string) {
	if o.i < len(o.ops) && o.audit[o.i] {
		o.fn(decision(o.ops[o.i]), outcome())
	}
	o.i++
}

func (o *auditOut) reply(r *scannerapi.Reply) int64 {
	o.next(func() string { return replyOutcome(*r) })
	return o.inner.reply(r)
}

func (o *auditOut) result(r valkey.ValkeyResult) int64 {
	o.next(func() string {
		if err := r.Error(); err != nil {
			return errOutcome(err)
		}
		m, _ := r.ToMessage()
		return messageOutcome(&m)
	})
	return o.inner.result(r)
}

func (o *auditOut) message(m *valkey.ValkeyMessage) int64 {
	o.next(func() string {
		if err := m.Error(); err != nil {
			return errOutcome(err)
		}
		return messageOutcome(m)
	})
	return o.inner.message(m)
}

func (o *auditOut) grow(n int64)                    { o.inner.grow(n) }
func (o *auditOut) replaceLast(r *scannerapi.Reply) { o.inner.replaceLast(r) }

func errOutcome(err error) string {
	var verr *valkey.ValkeyError
	if errors.As(err, &verr) {
		return audit.Refused
	}
	return audit.Failed
}

// messageOutcome reads a function's status ({1, "OK"|"ALREADY_SATISFIED"
// |"DUPLICATE", ...}) or a plain write's count.
// The kind is asked first: a conversion that fails builds an error (with
// fmt), which cost more than the rest of an action's entry.
func messageOutcome(m *valkey.ValkeyMessage) string {
	switch {
	case m.IsInt64():
		n, _ := m.AsInt64()
		return audit.Outcome(false, false, "", n, true)
	case m.IsArray():
		if arr, _ := m.ToArray(); len(arr) >= 2 && arr[1].IsString() {
			st, _ := arr[1].ToString()
			return audit.Outcome(false, false, st, 0, false)
		}
	}
	return audit.Acted
}

// replyOutcome reads a Reply (a Postgres function's, or one the host
// made).
func replyOutcome(r scannerapi.Reply) string {
	switch {
	case r.ErrClass == scannerapi.ErrTransport:
		return audit.Failed
	case r.Failed():
		return audit.Refused
	case r.Kind == scannerapi.KindInt:
		return audit.Outcome(false, false, "", r.Int, true)
	case r.Kind == scannerapi.KindArray && len(r.Array) >= 2:
		return audit.Outcome(false, false, r.Array[1].Str, 0, false)
	}
	return audit.Acted
}
