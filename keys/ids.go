package keys

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// UUID is 16 raw bytes in RFC 4122 (big-endian) order. Partition math hashes
// these bytes, never the text form.
type UUID [16]byte

// NewUUID returns a random version-4 UUID.
func NewUUID() UUID {
	var u UUID
	if _, err := rand.Read(u[:]); err != nil {
		// crypto/rand does not fail on supported platforms; an id we cannot
		// make random must not be made at all.
		panic("keys: crypto/rand: " + err.Error())
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// String is the canonical form: lowercase, hyphenated.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// IsZero reports the nil UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// ParseUUID accepts the hyphenated 36-character form or the 32-hex simple
// form, in either case, and returns the UUID (whose String is canonical).
// FlowFabric re-serialises bare ids the same way.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	var digits string
	switch len(s) {
	case 36:
		for _, i := range []int{8, 13, 18, 23} {
			if s[i] != '-' {
				return u, fmt.Errorf("uuid %q: expected '-' at position %d", s, i)
			}
		}
		digits = s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	case 32:
		digits = s
	default:
		return u, fmt.Errorf("uuid %q: length %d, want 36 (hyphenated) or 32 (hex)", s, len(s))
	}
	if _, err := hex.Decode(u[:], []byte(digits)); err != nil {
		return UUID{}, fmt.Errorf("uuid %q: not hexadecimal", s)
	}
	return u, nil
}

// parseCanonicalUUID accepts only the form String writes, so that an id read
// back from Valkey produces exactly the keys it was stored under.
func parseCanonicalUUID(s string) (UUID, error) {
	if len(s) != 36 {
		return UUID{}, fmt.Errorf("uuid %q: length %d, want 36 (lowercase, hyphenated)", s, len(s))
	}
	if strings.ToLower(s) != s {
		return UUID{}, fmt.Errorf("uuid %q: must be lowercase", s)
	}
	return ParseUUID(s)
}

// The bare id types. Each is a UUID that formats canonically. Distinct types
// keep a budget id from being passed where a flow id is wanted.
type (
	// FlowID identifies a flow (DAG); its partition hashes its raw bytes.
	FlowID struct{ u UUID }
	// BudgetID identifies a budget.
	BudgetID struct{ u UUID }
	// QuotaID identifies a quota policy.
	QuotaID struct{ u UUID }
)

// NewFlowID mints a random flow id.
func NewFlowID() FlowID { return FlowID{NewUUID()} }

// FlowIDFrom wraps a caller-chosen UUID.
func FlowIDFrom(u UUID) FlowID { return FlowID{u} }

// ParseFlowID parses a bare flow UUID.
func ParseFlowID(s string) (FlowID, error) {
	u, err := ParseUUID(s)
	if err != nil {
		return FlowID{}, fmt.Errorf("flow id: %w", err)
	}
	return FlowID{u}, nil
}

func (id FlowID) String() string { return id.u.String() }

// UUID returns the raw UUID.
func (id FlowID) UUID() UUID { return id.u }

// NewBudgetID mints a random budget id.
func NewBudgetID() BudgetID { return BudgetID{NewUUID()} }

// BudgetIDFrom wraps a caller-chosen UUID.
func BudgetIDFrom(u UUID) BudgetID { return BudgetID{u} }

// ParseBudgetID parses a bare budget UUID.
func ParseBudgetID(s string) (BudgetID, error) {
	u, err := ParseUUID(s)
	if err != nil {
		return BudgetID{}, fmt.Errorf("budget id: %w", err)
	}
	return BudgetID{u}, nil
}

func (id BudgetID) String() string { return id.u.String() }

// UUID returns the raw UUID.
func (id BudgetID) UUID() UUID { return id.u }

// NewQuotaID mints a random quota policy id.
func NewQuotaID() QuotaID { return QuotaID{NewUUID()} }

// QuotaIDFrom wraps a caller-chosen UUID.
func QuotaIDFrom(u UUID) QuotaID { return QuotaID{u} }

// ParseQuotaID parses a bare quota policy UUID.
func ParseQuotaID(s string) (QuotaID, error) {
	u, err := ParseUUID(s)
	if err != nil {
		return QuotaID{}, fmt.Errorf("quota id: %w", err)
	}
	return QuotaID{u}, nil
}

func (id QuotaID) String() string { return id.u.String() }

// UUID returns the raw UUID.
func (id QuotaID) UUID() UUID { return id.u }

// ExecutionID is "{fp:N}:<uuid>": the partition is fixed at mint time and
// read back from the id, never recomputed from the current config.
type ExecutionID struct {
	part uint16
	u    UUID
}

// NewExecutionIDForFlow mints an id in the flow's partition, so the
// execution shares a cluster slot with its flow.
func NewExecutionIDForFlow(c PartitionConfig, flow FlowID) ExecutionID {
	return ExecutionID{part: c.FlowPartition(flow).Index, u: NewUUID()}
}

// NewSoloExecutionID mints an id for an execution outside any flow, in the
// partition of its lane.
func NewSoloExecutionID(c PartitionConfig, lane string) ExecutionID {
	return ExecutionID{part: c.SoloPartition(lane).Index, u: NewUUID()}
}

// ExecutionIDForFlow builds the id of a caller-chosen UUID in a flow's
// partition (deterministic mint; stable only while the flow partition count
// stays the same).
func ExecutionIDForFlow(c PartitionConfig, flow FlowID, u UUID) ExecutionID {
	return ExecutionID{part: c.FlowPartition(flow).Index, u: u}
}

// SoloExecutionID builds the id of a caller-chosen UUID in a lane's
// partition (deterministic mint).
func SoloExecutionID(c PartitionConfig, lane string, u UUID) ExecutionID {
	return ExecutionID{part: c.SoloPartition(lane).Index, u: u}
}

// ExecutionIDIn builds the id of a UUID in an explicit flow partition.
func ExecutionIDIn(p Partition, u UUID) (ExecutionID, error) {
	if p.Family != FamilyFlow {
		return ExecutionID{}, fmt.Errorf("execution id: partition %s is not a flow partition", p.Tag())
	}
	return ExecutionID{part: p.Index, u: u}, nil
}

// ParseExecutionID parses "{fp:N}:<uuid>" strictly. FlowFabric keeps ids
// verbatim, so a non-canonical spelling ("{fp:007}", upper-case hex) would
// name other keys than the execution's own; we refuse those instead of
// silently addressing keys that do not exist.
func ParseExecutionID(s string) (ExecutionID, error) {
	if !strings.HasPrefix(s, "{fp:") {
		return ExecutionID{}, fmt.Errorf("execution id %q: must start with \"{fp:\" (a bare uuid is not an execution id)", s)
	}
	end := strings.Index(s, "}:")
	if end < 0 {
		return ExecutionID{}, fmt.Errorf("execution id %q: missing \"}:\" after the partition", s)
	}
	part, err := parseCanonicalU16(s[len("{fp:"):end])
	if err != nil {
		return ExecutionID{}, fmt.Errorf("execution id %q: partition %w", s, err)
	}
	u, err := parseCanonicalUUID(s[end+2:])
	if err != nil {
		return ExecutionID{}, fmt.Errorf("execution id %q: %w", s, err)
	}
	return ExecutionID{part: part, u: u}, nil
}

// String is the canonical "{fp:N}:<uuid>".
func (id ExecutionID) String() string { return id.Partition().Tag() + ":" + id.u.String() }

// Partition is the flow partition embedded in the id.
func (id ExecutionID) Partition() Partition { return Partition{Family: FamilyFlow, Index: id.part} }

// UUID returns the uuid part.
func (id ExecutionID) UUID() UUID { return id.u }

// IsZero reports the zero value (not a parsed or minted id).
func (id ExecutionID) IsZero() bool { return id == ExecutionID{} }
