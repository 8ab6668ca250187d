// Package quota is the quota_reconciler scanner (scanners.md §9.3): it
// keeps each quota policy's bookkeeping true to what it meters.
//
//   - The sliding window loses the admissions older than the window, as
//     the library's own admission check trims it ((-inf, now - window]),
//     so an idle quota does not carry a full window forever.
//   - The concurrency counter is set to the number of admitted executions
//     that are still running, and executions that ended (or were purged)
//     leave the admitted set: a worker that died before releasing its
//     admission no longer holds a slot forever.
//
// Running means the execution's core exists and is not terminal.
// FlowFabric counts admission guards instead, whose TTL is the rate
// window, so an execution that runs longer than the window silently stops
// counting and more admissions than the cap get through (P10).
//
// The host reads each quota partition's quota_policies set, one SSCAN
// step per cycle. Per policy: one wave reads the definition; one trims the
// window and reads the admitted set and the counter; one reads the
// admitted executions' phases; one removes the ended ones and corrects the
// counter. A policy id whose definition is gone is pruned from the index.
package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Name and version.
const (
	Name    = "quota_reconciler"
	Version = "1.0.0"
	source  = "quota_policies"
)

// Scanner is quota_reconciler. Safe for concurrent use by partitions.
type Scanner struct {
	failures *scannerapi.FailureTracker
	intake   scanutil.Intake[keys.QuotaID]
}

// New returns the scanner. quota_policies members that are not quota ids
// are pruned; a non-canonical spelling is left.
func New() *Scanner {
	f := scannerapi.NewFailureTracker()
	return &Scanner{failures: f, intake: scanutil.Intake[keys.QuotaID]{Parse: scanutil.QuotaIDs, Sources: []string{source},
		Remove: []keys.IDForm{keys.IDInvalid}, RemoveWith: "SREM", Failures: f}}
}

// Info implements scannerapi.Scanner.
func (s *Scanner) Info() scannerapi.Info {
	return scannerapi.Info{
		Name: Name, Version: Version, APIVersion: scannerapi.APIVersion, Family: keys.FamilyQuota,
		DefaultInterval: 30 * time.Second, DefaultBatch: 50,
		Sources: []scannerapi.CandidateSource{{Name: source, Kind: scannerapi.SourceSetScan,
			Key: "ff:idx:{p}:quota_policies", Backlog: scannerapi.BacklogSize}},
		// HMGET: definitions. ZREMRANGEBYSCORE: the window trim. SMEMBERS,
		// GET: admitted set and counter. HGET: admitted executions'
		// phases. SREM: ended admissions, pruned ids. SET: the counter.
		Commands: []string{"HMGET", "ZREMRANGEBYSCORE", "SMEMBERS", "GET", "HGET", "SREM", "SET"},
		KeyScopes: []scannerapi.KeyScope{
			{Command: "ZREMRANGEBYSCORE", Patterns: []string{"ff:quota:{q:*}:*:window:*"}},
			{Command: "SREM", Patterns: []string{"ff:idx:{q:*}:quota_policies", "ff:quota:{q:*}:*:admitted_set"}},
			{Command: "SET", Patterns: []string{"ff:quota:{q:*}:*:concurrency"}},
		},
	}
}

// Configure implements scannerapi.Scanner (no options).
func (s *Scanner) Configure(ctx context.Context, options map[string]string) error {
	_, err := scanutil.ParseOptions(s.Info().Options, options)
	return err
}

// ScanPartition implements scannerapi.Scanner.
func (s *Scanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyQuota {
		return nil, fmt.Errorf("partition %s is not a quota partition", req.Partition)
	}
	sc := &scan{s: s, req: req, res: &scannerapi.ScanResult{}, log: scannerapi.Logger(ctx)}
	sc.in = s.intake.Begin(ctx, req, sc.res)
	for _, c := range req.Candidates {
		if id, v := sc.in.Admit(c); v == scanutil.Take {
			sc.toDef = append(sc.toDef, &policy{raw: c.Member, qk: keys.QuotaIn(req.Partition, id)})
		}
	}
	if _, err := scanutil.Waves(ctx, host, 0, sc.build); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return sc.res, nil
}
