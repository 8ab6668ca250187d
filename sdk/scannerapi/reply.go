package scannerapi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FCall builds an FCALL of a library function:
// FCALL fn len(keys) keys... args...
func FCall(fn string, keys []string, args ...string) Command {
	cmd := make(Command, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "FCALL", fn, strconv.Itoa(len(keys)))
	cmd = append(cmd, keys...)
	return append(cmd, args...)
}

// ParseFCall reads an FCALL or FCALL_RO command back into its function,
// KEYS and ARGV. ok is false for any other command and for one whose key
// count does not fit its arguments.
func ParseFCall(c Command) (fn string, keys, args []string, ok bool) {
	if len(c) < 3 || !(strings.EqualFold(c[0], "FCALL") || strings.EqualFold(c[0], "FCALL_RO")) {
		return "", nil, nil, false
	}
	n, err := strconv.Atoi(c[2])
	if err != nil || n < 0 || 3+n > len(c) {
		return "", nil, nil, false
	}
	return c[1], c[3 : 3+n], c[3+n:], true
}

// FirstKey returns the key a command addresses first, as cluster routing
// sees it: an FCALL's first KEYS element, nothing for keyless commands
// (TIME, PING, ECHO, INFO, FUNCTION, DBSIZE) and FCALLs without KEYS, else
// the first argument.
func FirstKey(c Command) (string, bool) {
	if len(c) == 0 {
		return "", false
	}
	if _, ks, _, ok := ParseFCall(c); ok {
		if len(ks) == 0 {
			return "", false
		}
		return ks[0], true
	}
	switch strings.ToUpper(c[0]) {
	case "FCALL", "FCALL_RO", "TIME", "PING", "ECHO", "INFO", "FUNCTION", "DBSIZE":
		return "", false
	}
	if len(c) < 2 {
		return "", false
	}
	return c[1], true
}

// ReplyError is a command that got no usable reply: Reply.Err was set.
type ReplyError struct {
	Class ErrorClass // transport, server or refused
	Msg   string     // the error text (a RESP error message or the host's reason)
}

// Error implements error.
func (e *ReplyError) Error() string {
	if e.Class == "" {
		return e.Msg
	}
	return string(e.Class) + ": " + e.Msg
}

// Failed reports whether the command failed (Err is set).
func (r Reply) Failed() bool { return r.Err != "" || r.Kind == KindError }

// AsError returns the command's failure as a *ReplyError, or nil. A failed
// reply without a class is classed ErrServer (a RESP error reply).
func (r Reply) AsError() error {
	if !r.Failed() {
		return nil
	}
	class := r.ErrClass
	if class == "" {
		class = ErrServer
	}
	msg := r.Err
	if msg == "" {
		msg = r.Str
	}
	return &ReplyError{Class: class, Msg: msg}
}

// IsNil reports a nil reply (a missing key or field).
func (r Reply) IsNil() bool { return r.Kind == KindNil && !r.Failed() }

// Text returns a scalar reply as text: strings as they are, integers and
// doubles in decimal, nil as "". ok is false for arrays and failures.
func (r Reply) Text() (s string, ok bool) {
	if r.Failed() {
		return "", false
	}
	switch r.Kind {
	case KindNil:
		return "", true
	case KindString:
		return r.Str, true
	case KindInt:
		return strconv.FormatInt(r.Int, 10), true
	case KindFloat:
		return strconv.FormatFloat(r.Float, 'f', -1, 64), true
	}
	return "", false
}

// Reply statuses of a successful FlowFabric function call.
const (
	StatusOK               = "OK"
	StatusAlreadySatisfied = "ALREADY_SATISFIED"
	StatusDuplicate        = "DUPLICATE"
)

// FunctionReply is a FlowFabric library function's reply. Every function
// answers an array: {1, status, fields...} on success (status "OK",
// "ALREADY_SATISFIED" or "DUPLICATE"), {0, code, detail...} on a logical
// failure. A logical failure is a result, not a transport error: classify
// it by Code.
type FunctionReply struct {
	// Success is element 0 == 1.
	Success bool
	// Status is element 1 of a success ("OK", "ALREADY_SATISFIED", ...);
	// empty on failure.
	Status string
	// Code is element 1 of a failure (e.g. "execution_not_active"); empty
	// on success.
	Code string
	// Fields are the elements after the second, as text (integers in
	// decimal, nil as "").
	Fields []string
}

// Field returns Fields[i], or "" when there is no such field.
func (f FunctionReply) Field(i int) string {
	if i < 0 || i >= len(f.Fields) {
		return ""
	}
	return f.Fields[i]
}

// ErrMalformedReply is wrapped by ParseFunctionReply's error when a reply
// does not have the FlowFabric shape.
var ErrMalformedReply = errors.New("malformed FlowFabric function reply")

// ParseFunctionReply reads an FCALL reply. A failed command gives its
// *ReplyError (test with errors.As); a reply that is not
// {0|1, string, scalars...} gives an error wrapping ErrMalformedReply.
func ParseFunctionReply(r Reply) (FunctionReply, error) {
	if err := r.AsError(); err != nil {
		return FunctionReply{}, err
	}
	malformed := func(why string) (FunctionReply, error) {
		return FunctionReply{}, fmt.Errorf("%w: %s (%s)", ErrMalformedReply, why, describeReply(r))
	}
	if r.Kind != KindArray {
		return malformed("not an array")
	}
	if len(r.Array) < 2 {
		return malformed("fewer than 2 elements")
	}
	var flag int64
	switch head := r.Array[0]; head.Kind {
	case KindInt:
		flag = head.Int
	case KindString:
		n, err := strconv.ParseInt(head.Str, 10, 64)
		if err != nil {
			return malformed("element 0 is not 0 or 1")
		}
		flag = n
	default:
		return malformed("element 0 is not 0 or 1")
	}
	if flag != 0 && flag != 1 {
		return malformed("element 0 is not 0 or 1")
	}
	second := r.Array[1]
	if second.Kind != KindString || second.Str == "" {
		return malformed("element 1 is not a non-empty string")
	}
	out := FunctionReply{Success: flag == 1}
	if out.Success {
		out.Status = second.Str
	} else {
		out.Code = second.Str
	}
	if rest := r.Array[2:]; len(rest) > 0 {
		out.Fields = make([]string, len(rest))
		for i, e := range rest {
			s, ok := e.Text()
			if !ok {
				return malformed(fmt.Sprintf("element %d is not a scalar", i+2))
			}
			out.Fields[i] = s
		}
	}
	return out, nil
}

func describeReply(r Reply) string {
	switch r.Kind {
	case KindNil:
		return "nil"
	case KindString:
		s := r.Str
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		return strconv.Quote(s)
	case KindInt:
		return "integer " + strconv.FormatInt(r.Int, 10)
	case KindFloat:
		return "double " + strconv.FormatFloat(r.Float, 'g', -1, 64)
	case KindArray:
		return fmt.Sprintf("array of %d", len(r.Array))
	}
	return fmt.Sprintf("kind %d", r.Kind)
}

// AddError adds n failures of a class and code to the result, merging with
// an existing entry of the same class and code. Writes held back in
// shadow mode (ErrShadow) are not failures: the host counts them.
func (r *ScanResult) AddError(class ErrorClass, code string, n int64) {
	if n == 0 || class == ErrShadow {
		return
	}
	for i := range r.Errors {
		if r.Errors[i].Class == class && r.Errors[i].Code == code {
			r.Errors[i].Count += n
			return
		}
	}
	r.Errors = append(r.Errors, ErrorCount{Class: class, Code: code, Count: n})
}

// MaxNotes is how many notes a result carries; later ones are dropped.
const MaxNotes = 100

// Note adds a human-readable line to the result (for scan-once and dry
// runs), up to MaxNotes.
func (r *ScanResult) Note(format string, args ...any) {
	if len(r.Notes) < MaxNotes {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}

// ErrorTotal is the sum of the result's error counts.
func (r *ScanResult) ErrorTotal() int64 {
	var n int64
	for _, e := range r.Errors {
		n += e.Count
	}
	return n
}

// ScoredMember is one member of a sorted set with its score.
type ScoredMember struct {
	Member string  // the member
	Score  float64 // its score
}

// ParseScoredMembers reads the reply of a WITHSCORES range (ZRANGE,
// ZRANGEBYSCORE, ZPOPMIN...) in either protocol's shape: a flat list
// member, score, member, score... (RESP2) or a list of [member, score] pairs
// (RESP3).
func ParseScoredMembers(r Reply) ([]ScoredMember, error) {
	if err := r.AsError(); err != nil {
		return nil, err
	}
	if r.Kind != KindArray {
		return nil, fmt.Errorf("%w: scored members: not an array (%s)", ErrMalformedReply, describeReply(r))
	}
	score := func(e Reply) (float64, error) {
		if e.Kind == KindFloat {
			return e.Float, nil
		}
		if e.Kind == KindInt {
			return float64(e.Int), nil
		}
		s, ok := e.Text()
		if !ok {
			return 0, fmt.Errorf("%w: scored members: score is %s", ErrMalformedReply, describeReply(e))
		}
		return strconv.ParseFloat(s, 64)
	}
	member := func(e Reply) (string, error) {
		if e.Kind != KindString {
			return "", fmt.Errorf("%w: scored members: member is %s", ErrMalformedReply, describeReply(e))
		}
		return e.Str, nil
	}
	var out []ScoredMember
	if len(r.Array) > 0 && r.Array[0].Kind == KindArray {
		out = make([]ScoredMember, 0, len(r.Array))
		for _, pair := range r.Array {
			if pair.Kind != KindArray || len(pair.Array) != 2 {
				return nil, fmt.Errorf("%w: scored members: pair is %s", ErrMalformedReply, describeReply(pair))
			}
			m, err := member(pair.Array[0])
			if err != nil {
				return nil, err
			}
			sc, err := score(pair.Array[1])
			if err != nil {
				return nil, err
			}
			out = append(out, ScoredMember{Member: m, Score: sc})
		}
		return out, nil
	}
	if len(r.Array)%2 != 0 {
		return nil, fmt.Errorf("%w: scored members: odd flat list of %d", ErrMalformedReply, len(r.Array))
	}
	out = make([]ScoredMember, 0, len(r.Array)/2)
	for i := 0; i < len(r.Array); i += 2 {
		m, err := member(r.Array[i])
		if err != nil {
			return nil, err
		}
		sc, err := score(r.Array[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, ScoredMember{Member: m, Score: sc})
	}
	return out, nil
}
