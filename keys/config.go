package keys

import (
	"fmt"
	"strconv"
)

// Default partition counts of a FlowFabric deployment.
const (
	DefaultFlowPartitions   = 256
	DefaultBudgetPartitions = 32
	DefaultQuotaPartitions  = 32
)

// Field names of the ff:config:partitions hash.
const (
	FieldNumFlowPartitions   = "num_flow_partitions"
	FieldNumBudgetPartitions = "num_budget_partitions"
	FieldNumQuotaPartitions  = "num_quota_partitions"
)

// PartitionConfig is the number of partitions of each family. Every process
// that touches the keyspace must agree on it: it decides where new flows,
// solo executions and budgets live.
type PartitionConfig struct {
	Flow   uint16
	Budget uint16
	Quota  uint16
}

// DefaultPartitionConfig is 256 flow, 32 budget and 32 quota partitions.
func DefaultPartitionConfig() PartitionConfig {
	return PartitionConfig{Flow: DefaultFlowPartitions, Budget: DefaultBudgetPartitions, Quota: DefaultQuotaPartitions}
}

// Validate rejects zero counts (a modulus of zero).
func (c PartitionConfig) Validate() error {
	for _, f := range c.fields() {
		if f.v == 0 {
			return fmt.Errorf("partition config: %s must be at least 1", f.name)
		}
	}
	return nil
}

// Count returns the number of partitions of a family.
func (c PartitionConfig) Count(f Family) uint16 {
	switch f {
	case FamilyFlow:
		return c.Flow
	case FamilyBudget:
		return c.Budget
	case FamilyQuota:
		return c.Quota
	}
	return 0
}

// Partitions lists every partition of a family in index order.
func (c PartitionConfig) Partitions(f Family) []Partition {
	n := c.Count(f)
	out := make([]Partition, n)
	for i := range out {
		out[i] = Partition{Family: f, Index: uint16(i)}
	}
	return out
}

// FlowPartition is the partition of a flow: CRC16 of its 16 raw UUID bytes.
func (c PartitionConfig) FlowPartition(id FlowID) Partition {
	return Partition{Family: FamilyFlow, Index: CRC16(id.u[:]) % c.Flow}
}

// SoloPartition is the partition of an execution outside any flow: CRC16 of
// the lane string's bytes.
func (c PartitionConfig) SoloPartition(lane string) Partition {
	return Partition{Family: FamilyFlow, Index: CRC16([]byte(lane)) % c.Flow}
}

// BudgetPartition is the partition of a budget: CRC16 of its raw UUID bytes.
func (c PartitionConfig) BudgetPartition(id BudgetID) Partition {
	return Partition{Family: FamilyBudget, Index: CRC16(id.u[:]) % c.Budget}
}

// QuotaPartition is the partition of a quota policy: CRC16 of its raw UUID
// bytes.
func (c PartitionConfig) QuotaPartition(id QuotaID) Partition {
	return Partition{Family: FamilyQuota, Index: CRC16(id.u[:]) % c.Quota}
}

type namedCount struct {
	name string
	v    uint16
}

func (c PartitionConfig) fields() []namedCount {
	return []namedCount{
		{FieldNumFlowPartitions, c.Flow},
		{FieldNumBudgetPartitions, c.Budget},
		{FieldNumQuotaPartitions, c.Quota},
	}
}

// HashFields returns the ff:config:partitions fields and values, in order,
// as they are stored.
func (c PartitionConfig) HashFields() []string {
	var out []string
	for _, f := range c.fields() {
		out = append(out, f.name, strconv.FormatUint(uint64(f.v), 10))
	}
	return out
}

// ParsePartitionHash reads the stored ff:config:partitions hash. FlowFabric's
// readers fall back to defaults for missing, unparsable or zero fields; we
// refuse instead, because a silent default here would route new work to
// other partitions than the rest of the deployment uses.
func ParsePartitionHash(h map[string]string) (PartitionConfig, error) {
	var c PartitionConfig
	dst := map[string]*uint16{
		FieldNumFlowPartitions:   &c.Flow,
		FieldNumBudgetPartitions: &c.Budget,
		FieldNumQuotaPartitions:  &c.Quota,
	}
	for _, name := range []string{FieldNumFlowPartitions, FieldNumBudgetPartitions, FieldNumQuotaPartitions} {
		raw, ok := h[name]
		if !ok {
			return c, fmt.Errorf("%s: field %s is missing", ConfigPartitions, name)
		}
		v, err := strconv.ParseUint(raw, 10, 16)
		if err != nil || v == 0 {
			return c, fmt.Errorf("%s: field %s = %q is not a partition count in 1..65535", ConfigPartitions, name, raw)
		}
		*dst[name] = uint16(v)
	}
	return c, nil
}

// CheckAgainst compares the configured counts (c) with the stored ones and
// names every field that differs, with both values.
func (c PartitionConfig) CheckAgainst(stored PartitionConfig) error {
	var diffs []string
	sf := stored.fields()
	for i, f := range c.fields() {
		if f.v != sf[i].v {
			diffs = append(diffs, fmt.Sprintf("%s: configured %d, stored %d", f.name, f.v, sf[i].v))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return &PartitionMismatchError{Configured: c, Stored: stored, Diffs: diffs}
}

// PartitionMismatchError says the configured partition counts differ from
// those recorded in ff:config:partitions. Running anyway would compute other
// partitions than the rest of the deployment.
type PartitionMismatchError struct {
	Configured, Stored PartitionConfig
	Diffs              []string
}

func (e *PartitionMismatchError) Error() string {
	s := "partition_mismatch: the configured partition counts differ from " + ConfigPartitions + " ("
	for i, d := range e.Diffs {
		if i > 0 {
			s += "; "
		}
		s += d
	}
	return s + "); fix the configuration to match the stored values"
}
