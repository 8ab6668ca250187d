package depresolve

import (
	"errors"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Result says what a call did. Counts are per edge unless stated.
type Result struct {
	// Resolved counts edges the library answered with a resolution
	// (the sum of the five statuses below).
	Resolved        int64
	Satisfied       int64
	Impossible      int64
	AlreadyResolved int64
	Pending         int64 // any_of/quorum group still undecided
	AlreadyFired    int64 // any_of/quorum group decided earlier
	// Skipped counts children the library made terminal "skipped"
	// because an edge became impossible.
	Skipped int64
	// Cascaded counts skipped children that were visited in turn: their
	// own outgoing edges (if any) were resolved.
	Cascaded int64
	// Promoted counts reconciled children with no unresolved edge that
	// were still blocked and have been released.
	Promoted int64
	// NotTerminal counts edges left alone because the upstream has not
	// finished (yet, or again after a replay).
	NotTerminal int64
	// Left lists skipped children deeper than MaxDepth whose edges were
	// not resolved; the dependency reconciler finds their children.
	Left []keys.ExecutionID
	// Errors counts failures by class (transport, server, refused, lua,
	// data) and code.
	Errors []scannerapi.ErrorCount
}

// ErrorTotal is the sum of the error counts.
func (r *Result) ErrorTotal() int64 {
	var n int64
	for _, e := range r.Errors {
		n += e.Count
	}
	return n
}

func (r *Result) addError(class scannerapi.ErrorClass, code string) {
	for i := range r.Errors {
		if r.Errors[i].Class == class && r.Errors[i].Code == code {
			r.Errors[i].Count++
			return
		}
	}
	r.Errors = append(r.Errors, scannerapi.ErrorCount{Class: class, Code: code, Count: 1})
}

// replyError counts a failed command; it reports whether rep failed.
func (r *Result) replyError(rep scannerapi.Reply, code string) bool {
	err := rep.AsError()
	if err == nil {
		return false
	}
	class := scannerapi.ErrServer
	var re *scannerapi.ReplyError
	if errors.As(err, &re) {
		class = re.Class
	}
	r.addError(class, code)
	return true
}

// AddTo merges the result into a scanner's ScanResult: Processed grows by
// the resolutions and promotions, errors are merged by class and code.
func (r *Result) AddTo(sr *scannerapi.ScanResult) {
	sr.Processed += r.Resolved + r.Promoted
	for _, e := range r.Errors {
		sr.AddError(e.Class, e.Code, e.Count)
	}
}
