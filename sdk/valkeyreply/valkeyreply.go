// Package valkeyreply converts valkey-go results into the transport-neutral
// scannerapi.Reply, in one place for every component that executes scanner
// commands: the host's callback service, the dependency resolver's library
// executor and the scanner test kit.
package valkeyreply

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Of converts a valkey-go result. A RESP error reply is class server,
// except the cluster's transient ones (see Transient), which are class
// transport like a result without a reply (connection, timeout, context):
// the command did not run, it should simply be tried again.
func Of(r valkey.ValkeyResult) scannerapi.Reply {
	msg, err := r.ToMessage()
	if err != nil {
		if valkey.IsValkeyNil(err) {
			return scannerapi.Reply{Kind: scannerapi.KindNil}
		}
		var verr *valkey.ValkeyError
		if errors.As(err, &verr) {
			class := scannerapi.ErrServer
			if Transient(verr) {
				class = scannerapi.ErrTransport
			}
			return scannerapi.Reply{Kind: scannerapi.KindError, Err: verr.Error(), ErrClass: class}
		}
		return scannerapi.Reply{Kind: scannerapi.KindError, Err: err.Error(), ErrClass: scannerapi.ErrTransport}
	}
	return convert(&msg)
}

// Write writes what Of returns for r to w, without building the Reply:
// the host answers a plugin's packed batch this way.
func Write(w *pluginhost.ReplyWriter, r valkey.ValkeyResult) {
	msg, err := r.ToMessage()
	if err != nil {
		rep := Of(r) // nil or an error: nothing to save
		w.Reply(&rep)
		return
	}
	write(w, &msg)
}

// OfMessage converts one message of a reply, such as an element of the
// array EXEC answers: an error element is class server.
func OfMessage(m *valkey.ValkeyMessage) scannerapi.Reply { return convert(m) }

// WriteMessage writes what OfMessage returns for m to w.
func WriteMessage(w *pluginhost.ReplyWriter, m *valkey.ValkeyMessage) { write(w, m) }

// write is convert for a ReplyWriter; the two must stay in step (the
// package's tests compare them on every kind of reply).
func write(w *pluginhost.ReplyWriter, m *valkey.ValkeyMessage) {
	switch {
	case m.IsNil():
		w.Nil()
	case m.IsInt64():
		v, _ := m.AsInt64()
		w.Int(v)
	case m.IsBool():
		v, _ := m.AsBool()
		if v {
			w.Int(1)
		} else {
			w.Int(0)
		}
	case m.IsFloat64():
		v, _ := m.AsFloat64()
		w.Float(v)
	case m.IsString():
		v, _ := m.ToString()
		w.String(v)
	case m.IsArray():
		vals, _ := m.ToArray()
		w.Array(len(vals))
		for i := range vals {
			write(w, &vals[i])
		}
	default:
		// Maps, errors and rarer kinds: as Of gives them.
		r := convert(m)
		w.Reply(&r)
	}
}

func convert(m *valkey.ValkeyMessage) scannerapi.Reply {
	switch {
	case m.IsNil():
		return scannerapi.Reply{Kind: scannerapi.KindNil}
	case m.IsInt64():
		v, _ := m.AsInt64()
		return scannerapi.Reply{Kind: scannerapi.KindInt, Int: v}
	case m.IsBool():
		v, _ := m.AsBool()
		r := scannerapi.Reply{Kind: scannerapi.KindInt}
		if v {
			r.Int = 1
		}
		return r
	case m.IsFloat64():
		v, _ := m.AsFloat64()
		return scannerapi.Reply{Kind: scannerapi.KindFloat, Float: v}
	case m.IsString():
		v, _ := m.ToString()
		return scannerapi.Reply{Kind: scannerapi.KindString, Str: v}
	case m.IsArray():
		vals, _ := m.ToArray()
		out := make([]scannerapi.Reply, len(vals))
		for i := range vals {
			out[i] = convert(&vals[i])
		}
		return scannerapi.Reply{Kind: scannerapi.KindArray, Array: out}
	case m.IsMap():
		// Flattened key, value; sorted by key so replies are deterministic
		// (RESP3 maps carry no meaningful order).
		mm, _ := m.ToMap()
		ks := make([]string, 0, len(mm))
		for k := range mm {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		out := make([]scannerapi.Reply, 0, 2*len(ks))
		for _, k := range ks {
			v := mm[k]
			out = append(out, scannerapi.Reply{Kind: scannerapi.KindString, Str: k}, convert(&v))
		}
		return scannerapi.Reply{Kind: scannerapi.KindArray, Array: out}
	}
	if err := m.Error(); err != nil {
		return scannerapi.Reply{Kind: scannerapi.KindError, Err: err.Error(), ErrClass: scannerapi.ErrServer}
	}
	// Verbatim strings, big numbers and anything newer: as text.
	v, err := m.ToAny()
	if err != nil {
		return scannerapi.Reply{Kind: scannerapi.KindError, Err: err.Error(), ErrClass: scannerapi.ErrServer}
	}
	return scannerapi.Reply{Kind: scannerapi.KindString, Str: fmt.Sprint(v)}
}

// Transient reports the error replies with which a server declines a
// command, for a moment, because of the cluster's state: a slot migrating
// (TRYAGAIN, and MOVED/ASK the client did not follow), a failover under
// way (CLUSTERDOWN, MASTERDOWN, READONLY from a demoted primary), a
// restart loading its data (LOADING). They say nothing about the item:
// counting them against it (a poison backoff, a page) would punish work
// for the cluster's weather. One of them comes from a command that did
// run: a script that touched a key of its slot the migration had already
// moved (NonLocalKey) stops there, its writes before that point kept, so
// its outcome is unknown, as that of a command whose reply was lost.
func Transient(err *valkey.ValkeyError) bool {
	if err == nil {
		return false
	}
	if err.IsTryAgain() || err.IsClusterDown() || err.IsLoading() {
		return true
	}
	msg := err.Error()
	if NonLocalKey(msg) {
		return true
	}
	for _, p := range []string{"MOVED ", "ASK ", "MASTERDOWN", "READONLY"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// nonLocalKey starts the error a script gets when it touches a key of a
// slot being migrated that is no longer on the node running it (Redis 7
// and Valkey word it alike).
const nonLocalKey = "Script attempted to access a non local key"

// NonLocalKey reports the error of a script stopped at a key its slot's
// migration had already moved: the script ran up to that key, and what it
// wrote before stays written.
func NonLocalKey(msg string) bool {
	return strings.HasPrefix(msg, nonLocalKey) || strings.HasPrefix(msg, "ERR "+nonLocalKey)
}
