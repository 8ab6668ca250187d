package scannertest

import "github.com/ffscan/ffscan/sdk/scannerapi"

// Replies built by hand, for the table tests of a scanner's pure
// decisions (CONTRIBUTING.md: what a reply means goes in decide.go): the
// shapes a Host hands back for a command.

// Str is a string reply.
func Str(s string) scannerapi.Reply { return scannerapi.Reply{Kind: scannerapi.KindString, Str: s} }

// Int is an integer reply.
func Int(n int64) scannerapi.Reply { return scannerapi.Reply{Kind: scannerapi.KindInt, Int: n} }

// Nil is a nil reply (a missing key or field).
func Nil() scannerapi.Reply { return scannerapi.Reply{Kind: scannerapi.KindNil} }

// Array is an array reply of rs.
func Array(rs ...scannerapi.Reply) scannerapi.Reply {
	return scannerapi.Reply{Kind: scannerapi.KindArray, Array: rs}
}

// Failed is the reply of a command that failed: an error of class with
// message msg.
func Failed(class scannerapi.ErrorClass, msg string) scannerapi.Reply {
	return scannerapi.Reply{Kind: scannerapi.KindError, Err: msg, ErrClass: class}
}
