package client

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ffscan/ffscan/lua"
	"github.com/valkey-io/valkey-go"
)

// Reply statuses of a successful {1, status, fields...} reply.
const (
	StatusOK               = "OK"
	StatusAlreadySatisfied = "ALREADY_SATISFIED"
	StatusDuplicate        = "DUPLICATE"
)

// reply is a successful library reply with its fields as strings.
type reply struct {
	Function string
	Status   string   // OK, ALREADY_SATISFIED, DUPLICATE, or a function's own word
	Fields   []string // everything after the status
}

// field returns field i, or "" when the reply is shorter: the library
// returns fewer fields on some idempotent paths.
func (r reply) field(i int) string {
	if i < len(r.Fields) {
		return r.Fields[i]
	}
	return ""
}

// parseReply is the single interpreter of library replies. A transport or
// server error (including a Lua runtime fault) is returned wrapped with the
// function name; {0, code, ...} becomes the typed error of that code;
// {1, status, ...} becomes a reply. Shapes without the leading 1/0 (e.g.
// ff_check_admission_and_record) go through parseBareReply instead.
func parseReply(function string, res valkey.ValkeyResult) (reply, error) {
	if err := res.Error(); err != nil {
		return reply{}, fmt.Errorf("%s: %w", function, err)
	}
	arr, err := res.ToArray()
	if err != nil || len(arr) < 2 {
		return reply{}, fmt.Errorf("%s: %w: want {1|0, status, ...}, got %v", function, ErrUnexpectedReply, res.String())
	}
	ok, err := arr[0].AsInt64()
	if err != nil {
		return reply{}, fmt.Errorf("%s: %w: status flag is not an integer", function, ErrUnexpectedReply)
	}
	strs, err := messageStrings(arr[1:])
	if err != nil {
		return reply{}, fmt.Errorf("%s: %w: %v", function, ErrUnexpectedReply, err)
	}
	switch ok {
	case 1:
		return reply{Function: function, Status: strs[0], Fields: strs[1:]}, nil
	case 0:
		return reply{}, newScriptError(function, strs[0], strs[1:])
	}
	return reply{}, fmt.Errorf("%s: %w: status flag %d", function, ErrUnexpectedReply, ok)
}

// messageStrings converts reply elements to strings. Lua numbers arrive as
// integers and Lua false as nil; both are mapped to their string form so
// callers see what the library meant, not how RESP encoded it.
func messageStrings(msgs []valkey.ValkeyMessage) ([]string, error) {
	out := make([]string, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.IsNil():
			out[i] = ""
		case m.IsInt64():
			n, _ := m.AsInt64()
			out[i] = strconv.FormatInt(n, 10)
		default:
			s, err := m.ToString()
			if err != nil {
				return nil, fmt.Errorf("element %d: %v", i, err)
			}
			out[i] = s
		}
	}
	return out, nil
}

// call runs one FCALL and parses its reply.
func (c *Client) call(ctx context.Context, fc lua.Call) (reply, error) {
	return parseReply(fc.Function, c.lib.Do(ctx, fc))
}
