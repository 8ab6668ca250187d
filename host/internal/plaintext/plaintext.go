// Package plaintext makes text the host did not write safe to show and
// log: one line, bounded. A plugin writes its scan errors, notes, Info
// strings and stderr; the host shows them in status and the console and
// writes them to its log. Unbounded, a plugin fills the log and the
// status document; with newlines or control characters, it writes lines
// that look like the host's own (a forged "[ERROR]"), or moves an
// operator's terminal cursor.
package plaintext

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Max bounds plugin-provided text wherever the host shows or logs it.
const Max = 512

// MaxLog bounds each message and value of the host's own log lines (which
// quote plugin text only bounded by Max, but join lists of their own).
const MaxLog = 4096

// Line returns s as one line of at most max bytes: control characters
// (newlines, carriage returns, tabs, escapes, C1 controls, DEL), Unicode
// line and paragraph separators, bidirectional overrides and invalid
// UTF-8 are written as Go escapes (\n, \x1b, \u2028); text past max is
// cut at a character boundary and marked "…[cut: N bytes]", N the
// length of the whole text.
func Line(s string, limit int) string {
	if clean(s) && len(s) <= limit {
		return s
	}
	marker := fmt.Sprintf("…[cut: %d bytes]", len(s))
	budget := max(0, limit-len(marker))
	out := make([]byte, 0, min(len(s), limit)+8)
	cut := 0 // the last piece boundary within budget
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\x`+strconv.FormatUint(uint64(s[i])|0x100, 16)[1:]...)
		case unsafe(r):
			out = append(out, escape(r)...)
		default:
			out = append(out, s[i:i+n]...)
		}
		i += n
		if len(out) <= budget {
			cut = len(out)
		}
		if len(out) > limit {
			return string(out[:cut]) + marker
		}
	}
	return string(out)
}

// clean reports whether s needs no escaping.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			if c >= 0x80 {
				return cleanUTF8(s[i:])
			}
			return false
		}
	}
	return true
}

func cleanUTF8(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafe(r) {
			return false
		}
		i += n
	}
	return true
}

// unsafe reports whether r may break a line or disguise text.
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional controls
	}
	return false
}

func escape(r rune) string {
	switch r {
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	if r < 0x100 {
		return `\x` + strconv.FormatUint(uint64(r)|0x100, 16)[1:]
	}
	return `\u` + strconv.FormatUint(uint64(r)|0x10000, 16)[1:]
}

// Value returns a log value safe to write: numbers, booleans, times and
// durations as they are, anything else as its text made one bounded line.
func Value(v any, max int) any {
	switch x := v.(type) {
	case nil, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64,
		time.Time, time.Duration:
		return v
	case string:
		return Line(x, max)
	case error:
		return Line(x.Error(), max)
	case fmt.Stringer:
		return Line(x.String(), max)
	case []byte:
		return Line(string(x), max)
	}
	return Line(fmt.Sprint(v), max)
}

// Error returns err with its text made one line of at most limit bytes
// (Line); errors.Is and errors.As still see err.
func Error(err error, limit int) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if safe := Line(text, limit); safe != text {
		return &lineError{text: safe, err: err}
	}
	return err
}

type lineError struct {
	text string
	err  error
}

func (e *lineError) Error() string { return e.text }
func (e *lineError) Unwrap() error { return e.err }
