package cancelreconciler

import (
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the pure decision logic: what a member string is, which
// keys a member's cancel needs, what a reply means, and how the look-ahead
// pages the backlog. It does no I/O.

// outcome is what a member's cancel (or acknowledgement) came to: the
// shared classification of scanutil.
type outcome = scanutil.CancelResult

// The cancel outcomes, by their shared names.
const (
	outCancelled       = scanutil.CancelCancelled
	outAlreadyTerminal = scanutil.CancelAlreadyTerminal
	outNotFound        = scanutil.CancelNotFound
	outLuaError        = scanutil.CancelLuaError
	outFailed          = scanutil.CancelFailed
	codeNotFound       = scanutil.CodeExecutionNotFound
)

// classifyAck reads one ff_ack_cancel_member reply: nil when it succeeded.
func classifyAck(r scannerapi.Reply) *outcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		class, code := scanutil.Classify(err)
		return &outcome{Kind: outFailed, Class: class, Code: code}
	}
	if !fr.Success {
		return &outcome{Kind: outLuaError, Class: scannerapi.ErrLua, Code: fr.Code}
	}
	return nil
}

// flowReason is the reason a member is cancelled with: the flow's
// cancel_reason, or FlowFabric's default when the field is absent (nil).
func flowReason(r scannerapi.Reply) string {
	if r.IsNil() {
		return DefaultReason
	}
	s, _ := r.Text()
	return s
}
