package client

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ffscan/ffscan/keys"
)

// Priority bounds. The library clamps out-of-range priorities silently
// (99999 is stored as 9000); the client refuses them instead, because a
// silently different priority is a scheduling bug nobody sees.
const (
	MinPriority = 0
	MaxPriority = 9000
)

// Capability limits of the library contract (both the worker's list and an
// execution's requirements). The byte limit applies to the comma-joined
// list, which is how the worker sends it.
const (
	MaxCapabilityTokens = 256
	MaxCapabilityBytes  = 4096
)

// Limits bound what a producer may write. They protect Valkey (one huge
// payload blocks the single-threaded server while it is copied) and keep
// tag hashes small enough to read whole.
type Limits struct {
	MaxPayloadBytes        int // payload of one execution; default 4 MiB
	MaxTags                int // tags on one execution; default 256
	MaxTagBytes            int // all tag keys and values together; default 64 KiB
	MaxIdempotencyKeyBytes int // default 256
	MaxReasonBytes         int // cancel/fail reasons; default 4096
}

// DefaultLimits returns the limits used for zero fields of
// Options.Limits. It is a function, not a variable, so no code linked
// into the process can change every client's defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxPayloadBytes:        4 << 20,
		MaxTags:                256,
		MaxTagBytes:            64 << 10,
		MaxIdempotencyKeyBytes: 256,
		MaxReasonBytes:         4096,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxPayloadBytes > 0 {
		d.MaxPayloadBytes = l.MaxPayloadBytes
	}
	if l.MaxTags > 0 {
		d.MaxTags = l.MaxTags
	}
	if l.MaxTagBytes > 0 {
		d.MaxTagBytes = l.MaxTagBytes
	}
	if l.MaxIdempotencyKeyBytes > 0 {
		d.MaxIdempotencyKeyBytes = l.MaxIdempotencyKeyBytes
	}
	if l.MaxReasonBytes > 0 {
		d.MaxReasonBytes = l.MaxReasonBytes
	}
	return d
}

func validateLane(field, lane string) error {
	if err := keys.ValidateLane(lane); err != nil {
		return &ValidationError{Field: field, Reason: err.Error()}
	}
	return nil
}

func validatePriority(field string, p int) error {
	if p < MinPriority || p > MaxPriority {
		return invalid(field, "%d is outside %d..%d", p, MinPriority, MaxPriority)
	}
	return nil
}

// validateText refuses strings that would corrupt keys or logs: empty when
// required, too long, or holding control bytes.
func validateText(field, s string, required bool, max int) error {
	if s == "" {
		if required {
			return invalid(field, "must not be empty")
		}
		return nil
	}
	if len(s) > max {
		return invalid(field, "%d bytes, at most %d allowed", len(s), max)
	}
	if !utf8.ValidString(s) {
		return invalid(field, "is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return invalid(field, "contains control character %U", r)
		}
	}
	return nil
}

// capabilityCSV validates capability tokens and returns them sorted,
// de-duplicated and comma-joined, the form the library compares. The rules
// are FlowFabric's worker rules: a comma would split a token (a {"gpu"}
// worker could then satisfy "gpu,cuda"), and whitespace or control
// characters make look-alike tokens that silently never match.
func capabilityCSV(field string, tokens []string) (string, error) {
	set := make(map[string]struct{}, len(tokens))
	for i, t := range tokens {
		f := fmt.Sprintf("%s[%d]", field, i)
		if t == "" {
			return "", invalid(f, "capability token must not be empty")
		}
		if strings.Contains(t, ",") {
			return "", invalid(f, "capability token %q contains ',' (the list separator)", t)
		}
		if !utf8.ValidString(t) {
			return "", invalid(f, "capability token %q is not valid UTF-8", t)
		}
		for _, r := range t {
			if unicode.IsControl(r) || unicode.IsSpace(r) {
				return "", invalid(f, "capability token %q contains whitespace or control character %U", t, r)
			}
		}
		set[t] = struct{}{}
	}
	if len(set) > MaxCapabilityTokens {
		return "", invalid(field, "%d distinct tokens, at most %d allowed", len(set), MaxCapabilityTokens)
	}
	list := make([]string, 0, len(set))
	for t := range set {
		list = append(list, t)
	}
	sort.Strings(list)
	csv := strings.Join(list, ",")
	if len(csv) > MaxCapabilityBytes {
		return "", invalid(field, "%d bytes when joined, at most %d allowed", len(csv), MaxCapabilityBytes)
	}
	return csv, nil
}

// splitCSV splits a comma-joined list; "" is the empty list.
func splitCSV(csv string) []string {
	if csv == "" {
		return nil
	}
	return strings.Split(csv, ",")
}
