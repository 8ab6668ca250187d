// Package keys holds FlowFabric's Valkey layout (library contract level 34):
// partition math, id parsing and minting, and a builder for every key, so no
// other package ever formats a key string by hand. It is pure: no I/O.
package keys

import (
	"fmt"
	"strconv"
	"strings"
)

// Family is a partition family. Each has its own hash-tag space.
type Family uint8

const (
	// FamilyFlow partitions flows and every execution ({fp:N}). FlowFabric's
	// "Execution" family is an alias of it.
	FamilyFlow Family = iota + 1
	// FamilyBudget partitions budgets ({b:M}).
	FamilyBudget
	// FamilyQuota partitions quota policies ({q:K}).
	FamilyQuota
)

// Prefix is the tag prefix of the family: fp, b or q.
func (f Family) Prefix() string {
	switch f {
	case FamilyFlow:
		return "fp"
	case FamilyBudget:
		return "b"
	case FamilyQuota:
		return "q"
	}
	return ""
}

// String names the family as configs and logs spell it.
func (f Family) String() string {
	switch f {
	case FamilyFlow:
		return "flow"
	case FamilyBudget:
		return "budget"
	case FamilyQuota:
		return "quota"
	}
	return fmt.Sprintf("family(%d)", uint8(f))
}

// ParseFamily reads a family name as String writes it ("flow", "budget",
// "quota"); "execution" is accepted as FlowFabric's alias of flow.
func ParseFamily(s string) (Family, error) {
	switch s {
	case "flow", "execution":
		return FamilyFlow, nil
	case "budget":
		return FamilyBudget, nil
	case "quota":
		return FamilyQuota, nil
	}
	return 0, fmt.Errorf("unknown partition family %q (want flow, budget or quota)", s)
}

// Partition is one partition of a family: the unit a scanner works on and
// the hash tag its keys share.
type Partition struct {
	Family Family
	Index  uint16
}

// Tag returns the hash tag including braces, e.g. "{fp:24}".
func (p Partition) Tag() string {
	return "{" + p.Family.Prefix() + ":" + strconv.FormatUint(uint64(p.Index), 10) + "}"
}

// String is the tag.
func (p Partition) String() string { return p.Tag() }

// ParseTag parses a hash tag such as "{fp:24}", "{b:3}" or "{q:0}". It is
// stricter than FlowFabric: the index must be canonical decimal (no sign, no
// leading zeros), so a parsed tag always formats back to the same bytes.
func ParseTag(s string) (Partition, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return Partition{}, fmt.Errorf("partition tag %q: must be enclosed in braces, like {fp:0}", s)
	}
	inner := s[1 : len(s)-1]
	prefix, num, ok := strings.Cut(inner, ":")
	if !ok {
		return Partition{}, fmt.Errorf("partition tag %q: missing ':' between family prefix and index", s)
	}
	var fam Family
	switch prefix {
	case "fp":
		fam = FamilyFlow
	case "b":
		fam = FamilyBudget
	case "q":
		fam = FamilyQuota
	default:
		return Partition{}, fmt.Errorf("partition tag %q: unknown family prefix %q (want fp, b or q)", s, prefix)
	}
	idx, err := parseCanonicalU16(num)
	if err != nil {
		return Partition{}, fmt.Errorf("partition tag %q: index %w", s, err)
	}
	return Partition{Family: fam, Index: idx}, nil
}

// parseCanonicalU16 accepts only the decimal form FormatUint would write.
func parseCanonicalU16(s string) (uint16, error) {
	if s == "" {
		return 0, fmt.Errorf("is empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero", s)
	}
	v, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range 0..65535", s)
	}
	return uint16(v), nil
}

// CRC16 is CRC-16/XMODEM (poly 0x1021, init 0, no reflection, no final
// xor): the checksum Valkey Cluster uses for slots and FlowFabric uses for
// partitions.
func CRC16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// ClusterSlot is the Valkey Cluster slot of a key: CRC16 of the first
// non-empty {...} group (or of the whole key) mod 16384. Exec keys carry two
// tags; only the first counts.
func ClusterSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return CRC16([]byte(key)) % 16384
}
