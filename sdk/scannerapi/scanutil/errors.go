package scanutil

import (
	"errors"
	"strings"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// CodeNonLocalKey is the code of a script stopped at a key its slot's
// migration had already moved; what the script wrote before that key
// stays written.
const CodeNonLocalKey = "non_local_key"

// ErrorCode makes a short metric code of a RESP error message: its first
// word when that is an upper-case error prefix (WRONGTYPE, NOSCRIPT, ERR),
// else "error". Codes become metric labels, so free text never does.
func ErrorCode(msg string) string {
	if strings.HasPrefix(msg, "Script attempted to access a non local key") {
		// A script stopped at a key a slot migration had moved
		// (valkeyreply.NonLocalKey): its own code, not "error".
		return CodeNonLocalKey
	}
	w, _, _ := strings.Cut(msg, " ")
	if w == "" || len(w) > 24 {
		return "error"
	}
	for i := 0; i < len(w); i++ {
		if c := w[i]; !(c >= 'A' && c <= 'Z' || c == '_') {
			return "error"
		}
	}
	return w
}

// Classify returns the class and code under which a failure is counted:
// a *scannerapi.ReplyError keeps its class and gets ErrorCode of its
// message; any other error (a reply of an unexpected shape) is a server
// error coded "malformed_reply".
func Classify(err error) (scannerapi.ErrorClass, string) {
	var re *scannerapi.ReplyError
	if errors.As(err, &re) {
		class := re.Class
		if class == "" {
			class = scannerapi.ErrServer
		}
		return class, ErrorCode(re.Msg)
	}
	return scannerapi.ErrServer, "malformed_reply"
}

// ClassifyReply is Classify for a reply that Failed.
func ClassifyReply(r scannerapi.Reply) (scannerapi.ErrorClass, string) {
	return Classify(r.AsError())
}

// IsOutage reports replies that all failed for want of a reply (class
// transport): the connection failed, not the items. A scanner that sees one
// drops what it derived from the store (Memory.Reset, Cursors.Reset),
// since it cannot tell what happened to the commands it sent.
func IsOutage(replies []scannerapi.Reply) bool {
	if len(replies) == 0 {
		return false
	}
	for _, r := range replies {
		if !r.Failed() || r.ErrClass != scannerapi.ErrTransport {
			return false
		}
	}
	return true
}
