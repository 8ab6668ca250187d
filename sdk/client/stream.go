package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// FrameMode says how a frame is kept (FlowFabric's stream modes).
type FrameMode string

const (
	// FrameDurable frames are kept (the stream is capped at 10 000).
	FrameDurable FrameMode = "durable"
	// FrameSummary frames carry a JSON merge patch (RFC 7396) applied to
	// the attempt's summary document; the stream keeps a short tail.
	FrameSummary FrameMode = "summary"
	// FrameBestEffort frames form a live tail that expires after twice
	// Frame.TTL unless the stream ever held a durable frame.
	FrameBestEffort FrameMode = "best_effort"
)

// MaxFramePayload is the largest payload a frame may carry.
const MaxFramePayload = 65536

// Frame is one entry of the task's attempt output stream.
type Frame struct {
	Type          string // e.g. "log", "token", "progress"; required
	Payload       []byte
	Encoding      string // default "utf8"
	CorrelationID string
	Mode          FrameMode     // default FrameDurable
	TTL           time.Duration // FrameBestEffort only: whole milliseconds, at least 1ms
}

// AppendResult says where a frame went.
type AppendResult struct {
	EntryID        string // the stream entry id
	FrameCount     int64  // frames appended to this attempt's stream, ever
	SummaryVersion int64  // FrameSummary: the summary document's new version
}

// AppendFrame appends a frame to the attempt's output stream
// (ff_append_frame), checked against the task's lease. A frame after the
// lease was lost is refused (stale_owner_cannot_append); one on an
// attempt that ended, stream_closed.
func (t *Task) AppendFrame(ctx context.Context, f Frame) (AppendResult, error) {
	if t.isFinished() {
		return AppendResult{}, ErrTaskFinished
	}
	if f.Mode == "" {
		f.Mode = FrameDurable
	}
	if f.Encoding == "" {
		f.Encoding = "utf8"
	}
	if err := validateText("Type", f.Type, true, 128); err != nil {
		return AppendResult{}, err
	}
	if len(f.Payload) > MaxFramePayload {
		return AppendResult{}, invalid("Payload", "%d bytes is more than %d", len(f.Payload), MaxFramePayload)
	}
	patchKind, ttl := "", "0"
	switch f.Mode {
	case FrameDurable:
	case FrameSummary:
		var doc map[string]any
		if err := json.Unmarshal(f.Payload, &doc); err != nil || doc == nil {
			return AppendResult{}, invalid("Payload", "a summary frame carries a JSON object (a merge patch)")
		}
		patchKind = "json-merge-patch"
	case FrameBestEffort:
		if f.TTL < time.Millisecond || f.TTL%time.Millisecond != 0 {
			return AppendResult{}, invalid("TTL", "%v must be whole milliseconds, at least 1ms, for a best-effort frame", f.TTL)
		}
		ttl = strconv.FormatInt(f.TTL.Milliseconds(), 10)
	default:
		return AppendResult{}, invalid("Mode", "%q is not durable, summary or best_effort", f.Mode)
	}
	ek := keys.Exec(t.id)
	r, err := t.w.c.call(ctx, lua.Call{
		Function: "ff_append_frame",
		Keys:     []string{ek.Core(), ek.Stream(t.attemptIndex), ek.StreamMeta(t.attemptIndex), ek.AttemptSummary(t.attemptIndex)},
		Args: []string{t.id.String(), strconv.FormatUint(uint64(t.attemptIndex), 10), t.leaseID, t.epoch,
			f.Type, "", string(f.Payload), f.Encoding, f.CorrelationID, "worker", "0", t.attemptID,
			strconv.Itoa(MaxFramePayload), string(f.Mode), patchKind, ttl, "0", "0", "0"},
	})
	if err != nil {
		return AppendResult{}, err
	}
	out := AppendResult{EntryID: r.field(0)}
	out.FrameCount, _ = strconv.ParseInt(r.field(1), 10, 64)
	out.SummaryVersion, _ = strconv.ParseInt(r.field(2), 10, 64)
	return out, nil
}

// StreamEntry is one frame as read back.
type StreamEntry struct {
	ID     string
	Fields map[string]string // frame_type, ts, payload, encoding, source, mode, ...
}

// StreamPage is a read of an attempt's stream.
type StreamPage struct {
	Entries      []StreamEntry
	ClosedAt     string // set once the attempt ended
	ClosedReason string
}

// ReadStreamOptions bound a stream read.
type ReadStreamOptions struct {
	From, To          string // entry ids; default "-" and "+" (all)
	Limit             int    // 1..10000; default 100
	ExcludeBestEffort bool   // leave out best-effort frames
}

// ReadStream reads frames of one attempt's output stream
// (ff_read_attempt_stream).
func (c *Client) ReadStream(ctx context.Context, id keys.ExecutionID, attempt uint32, opts ReadStreamOptions) (StreamPage, error) {
	if opts.From == "" {
		opts.From = "-"
	}
	if opts.To == "" {
		opts.To = "+"
	}
	if opts.Limit == 0 {
		opts.Limit = 100
	}
	if opts.Limit < 1 || opts.Limit > 10000 {
		return StreamPage{}, invalid("Limit", "%d is outside 1..10000", opts.Limit)
	}
	visibility := ""
	if opts.ExcludeBestEffort {
		visibility = "exclude_best_effort"
	}
	ek := keys.Exec(id)
	res := c.lib.Do(ctx, lua.Call{
		Function: "ff_read_attempt_stream",
		Keys:     []string{ek.Stream(attempt), ek.StreamMeta(attempt)},
		Args:     []string{opts.From, opts.To, strconv.Itoa(opts.Limit), visibility},
	})
	if err := res.Error(); err != nil {
		return StreamPage{}, fmt.Errorf("ff_read_attempt_stream: %w", err)
	}
	arr, err := res.ToArray()
	if err != nil || len(arr) < 2 {
		return StreamPage{}, fmt.Errorf("ff_read_attempt_stream: %w: %v", ErrUnexpectedReply, res.String())
	}
	if flag, _ := arr[0].AsInt64(); flag != 1 {
		_, perr := parseReply("ff_read_attempt_stream", res)
		return StreamPage{}, perr
	}
	if len(arr) < 5 {
		return StreamPage{}, fmt.Errorf("ff_read_attempt_stream: %w: %d elements", ErrUnexpectedReply, len(arr))
	}
	entries, err := arr[2].ToArray()
	if err != nil {
		return StreamPage{}, fmt.Errorf("ff_read_attempt_stream: %w: entries: %v", ErrUnexpectedReply, err)
	}
	page := StreamPage{}
	page.ClosedAt, _ = arr[3].ToString()
	page.ClosedReason, _ = arr[4].ToString()
	for _, e := range entries {
		pair, err := e.ToArray()
		if err != nil || len(pair) != 2 {
			return StreamPage{}, fmt.Errorf("ff_read_attempt_stream: %w: entry", ErrUnexpectedReply)
		}
		entryID, _ := pair[0].ToString()
		flat, err := pair[1].AsStrSlice()
		if err != nil {
			return StreamPage{}, fmt.Errorf("ff_read_attempt_stream: %w: fields: %v", ErrUnexpectedReply, err)
		}
		fields := make(map[string]string, len(flat)/2)
		for i := 0; i+1 < len(flat); i += 2 {
			fields[flat[i]] = flat[i+1]
		}
		page.Entries = append(page.Entries, StreamEntry{ID: entryID, Fields: fields})
	}
	return page, nil
}

// Summary is an attempt's summary document, built from its summary frames.
type Summary struct {
	Document     string // JSON; "" before the first summary frame
	Version      int64
	PatchKind    string
	LastUpdated  time.Time
	FirstApplied time.Time
}

// ReadSummary reads an attempt's summary document (ff_read_summary).
func (c *Client) ReadSummary(ctx context.Context, id keys.ExecutionID, attempt uint32) (Summary, error) {
	r, err := c.call(ctx, lua.Call{Function: "ff_read_summary", Keys: []string{keys.Exec(id).AttemptSummary(attempt)}})
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Document: r.field(0), PatchKind: r.field(2)}
	s.Version, _ = strconv.ParseInt(r.field(1), 10, 64)
	if s.Version > 0 { // before the first frame the times read "0"
		s.LastUpdated = msTime(r.field(3))
		s.FirstApplied = msTime(r.field(4))
	}
	return s, nil
}
