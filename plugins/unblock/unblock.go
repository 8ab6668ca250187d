// Package unblock is the unblock scanner (scanners.md §8.4): executions an
// admission check parked in a lane's blocked:budget, blocked:quota or
// blocked:route set are made eligible again (ff_unblock_execution) once
// what blocked them has cleared: every attached budget is under its hard
// limits, the quota's window and concurrency have room, or a worker of the
// namespace advertises every required capability.
//
// The host reads each lane's three sets by rank, a rotating window per
// partition and lane (a set whose head stays blocked cannot hide the
// entries behind it: FlowFabric's P3). Per scan: one wave reads the cores
// (and the filter), one reads what the reasons need (budget limits and
// usage, quota definitions, the namespace's worker index), one more reads
// quota windows and worker capabilities where needed, and the last calls
// the library for the executions that may go. An empty partition costs
// nothing.
//
// What the Go side decides differently (docs/compat.md, "unblock"):
//
//   - Read errors keep the execution blocked and are counted (FlowFabric
//     unblocks on a failed budget_ids or capabilities read, or a failed
//     worker-index load: P11).
//   - The quota check only reads (ZCOUNT over the live window); FlowFabric
//     trims the window from the scanner, a write outside the library
//     (P10).
//   - A hard limit is breached when usage >= limit (FlowFabric's unblock
//     rule; a report at the limit could not spend anything), for the
//     budgets named in budget_ids (P9).
//   - A {0, code} reply is a result: execution_not_eligible and
//     execution_not_found mean the execution moved on (counted skipped),
//     other codes are Lua errors (P2).
//   - An entry whose core is gone is removed from its set.
//   - The namespace / instance-tag filter applies (P13).
package unblock

import (
	"context"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name, version, function.
const (
	Name     = "unblock"
	Version  = "1.0.0"
	Function = "ff_unblock_execution"
)

// Scanner is the unblock scanner. Safe for concurrent use by partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker
	filter   scanutil.FilterSetting
}

// New returns the scanner with default options.
func New() *Scanner { return &Scanner{failures: scannerapi.NewFailureTracker()} }

// Info implements scannerapi.Scanner.
func (s *Scanner) Info() scannerapi.Info {
	var sources []scannerapi.CandidateSource
	var own []string
	for _, src := range sourceNames {
		s := scannerapi.CandidateSource{Name: src, Kind: scannerapi.SourceZSetRotate,
			Key: "ff:idx:{p}:lane:{lane}:blocked:" + src, Backlog: scannerapi.BacklogSize}
		sources = append(sources, s)
		own = append(own, s.KeyPattern())
	}
	return scannerapi.Info{
		Name: Name, Version: Version, APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow,
		DefaultInterval: 5 * time.Second, DefaultBatch: 100, Sources: sources,
		// HMGET/HGET: cores, quota definitions, capabilities and the
		// filter. HGETALL: budget limits and usage. ZCOUNT: the quota
		// window. GET: quota concurrency. SMEMBERS: the namespace's
		// workers. ZREM: entries whose core is gone. HGETALL also reads
		// ff:config:partitions (where budgets and quotas live).
		Commands:  []string{"HGET", "HMGET", "HGETALL", "ZCOUNT", "GET", "SMEMBERS", "ZREM"},
		KeyScopes: []scannerapi.KeyScope{{Command: "ZREM", Patterns: own}},
		Functions: []string{Function},
		// The execution's core, the blocked index it was read from, its
		// lane's eligible index.
		FunctionScopes: []scannerapi.FunctionScope{{Function: Function, Patterns: append(own, scanutil.ScopePatterns(nil,
			keys.Exec(scanutil.AnyExecution()).Core(), keys.FlowPart(keys.Partition{}).LaneEligible(scanutil.AnyLane))...)}},
		Options: scannerapi.FilterOptions(),
	}
}

// Configure implements scannerapi.Scanner.
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	return s.filter.Configure(ctx, s.Info().Options, options)
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	// Each blocked-set entry is its own piece of work; members that are
	// not execution ids are counted and left.
	res := &scannerapi.ScanResult{}
	in := s.intake().Begin(ctx, req, res)
	var items []*item
	for _, c := range req.Candidates {
		id, v := in.Admit(c)
		if v != scanutil.Take {
			continue
		}
		items = append(items, &item{src: c.Source, lane: c.Lane, key: c.Key, member: c.Member, id: id})
	}
	sc := newScan(ctx, req, s.filter.Get(), tally{res: res, failures: s.failures}, items)
	if err := sc.run(ctx, host, "exec"); err != nil {
		return nil, err
	}
	return res, nil
}

// intake is the scanner's rule for blocked-set members, the scan's and
// Explain's.
func (s *Scanner) intake() scanutil.Intake[keys.ExecutionID] {
	return scanutil.Intake[keys.ExecutionID]{Parse: scanutil.ExecutionIDs, Sources: sourceNames, PerIndex: true,
		Failures: s.failures}
}
