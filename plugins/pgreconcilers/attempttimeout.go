// Package pgreconcilers holds the reconcilers of FlowFabric's Postgres
// backend (postgres.md §4) as ffscan scanners. They read candidates through
// the host (ffscan's candidate functions, every partition of a cycle in one
// query) and act through PGCALLs of ffscan's action functions, each one
// transaction that locks its rows, re-checks and acts or does nothing.
//
// Their names are FlowFabric's with "pg_" in front (FlowFabric calls its
// tasks "pg.attempt_timeout", ...): one host may serve a Valkey and a
// Postgres deployment, whose attempt_timeout scanners differ, and a
// scanner's name keys its configuration, metrics and status.
package pgreconcilers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// AttemptTimeoutName is the scanner's name.
const AttemptTimeoutName = "pg_attempt_timeout"

// Version is the scanners' version.
const Version = "1.0.0"

// expireFunction is the action function attempt timeouts call.
const expireFunction = "expire_lapsed_lease"

// AttemptTimeout is FlowFabric's attempt_timeout reconciler on Postgres
// (postgres.md §4.2, §7.2): a lapsed attempt lease of an active execution
// is retried while the execution's attempt_index is below its
// retry_policy.max_retries, else the execution ends with an "expired"
// completion. ffscan.expire_lapsed_lease decides inside the database; see
// docs/compat.md for where it deliberately differs (PG3, PG4, PG16).
type AttemptTimeout struct {
	failures *scannerapi.FailureTracker
}

// NewAttemptTimeout returns the scanner.
func NewAttemptTimeout() *AttemptTimeout {
	return &AttemptTimeout{failures: scannerapi.NewFailureTracker()}
}

// Info implements scannerapi.Scanner.
func (s *AttemptTimeout) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:       AttemptTimeoutName,
		Version:    Version,
		APIVersion: scannerapi.APIVersion,
		Family:     keys.FamilyFlow,
		// FlowFabric's interval and batch (postgres.md §5).
		DefaultInterval: 2 * time.Second,
		DefaultBatch:    1000,
		Sources: []scannerapi.CandidateSource{{
			Name: "lapsed_leases",
			Kind: scannerapi.SourcePostgres,
			Key:  "lapsed_leases",
		}},
		Functions: []string{"pg:" + expireFunction},
	}
}

// Configure implements scannerapi.Scanner. The scanner takes no options.
func (s *AttemptTimeout) Configure(ctx context.Context, options map[string]string) error {
	_, err := scanutil.ParseOptions(nil, options)
	return err
}

// chunk bounds the PGCALLs of one callback.
const chunk = 500

// ScanPartition implements scannerapi.Scanner.
func (s *AttemptTimeout) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != keys.FamilyFlow {
		return nil, fmt.Errorf("partition %s is not a flow partition", req.Partition)
	}
	res := &scannerapi.ScanResult{}
	log := scannerapi.Logger(ctx)
	var b scanutil.Batch
	for _, c := range req.Candidates {
		eid, attempt, err := parseMember(c.Member)
		if err != nil {
			// The host's candidate function wrote it: not data to act on.
			res.AddError(scannerapi.ErrInvalid, "invalid_member", 1)
			log.Warn("candidate is not <execution uuid>/<attempt index>", "member", c.Member, "error", err)
			continue
		}
		item := eid + "/" + strconv.Itoa(attempt)
		if s.failures.ShouldSkip(item, req.Cycle) {
			res.Skipped++
			continue
		}
		if req.DryRun {
			// The decision is the database's, under the row lock; a dry run
			// can only say which lapses it would hand it.
			res.Processed++
			res.Note("would decide the lapsed lease of %s attempt %d", eid, attempt)
			continue
		}
		b.Add(func(r []scannerapi.Reply) { s.record(res, req.Cycle, item, r[0], log) },
			scannerapi.PGCall(expireFunction, strconv.Itoa(int(req.Partition.Index)), eid, strconv.Itoa(attempt)))
	}
	if err := b.ExecChunked(ctx, host, chunk); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return res, nil
}

// record accounts for one expire_lapsed_lease reply.
func (s *AttemptTimeout) record(res *scannerapi.ScanResult, cycle uint64, item string, r scannerapi.Reply, log interface {
	Error(string, ...any)
}) {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		class, code := scanutil.Classify(err)
		res.AddError(class, code, 1)
		if s.failures.RecordFailureClass(item, cycle, class) {
			log.Error("persistent failure; skipping the lapsed lease for a while", "item", item, "class", class, "code", code,
				"backoff_cycles", scannerapi.DefaultBackoffCycles)
		}
		return
	}
	if !fr.Success {
		res.AddError(scannerapi.ErrLua, fr.Code, 1)
		s.failures.RecordFailureClass(item, cycle, scannerapi.ErrLua)
		return
	}
	s.failures.RecordSuccess(item)
	switch fr.Status {
	case "retried", "terminal":
		res.Processed++
	default:
		// Renewed, released or no longer active since the read: the
		// function re-checked and left it.
		res.Skipped++
	}
}

// parseMember reads "<execution uuid>/<attempt index>".
func parseMember(m string) (string, int, error) {
	id, idx, ok := strings.Cut(m, "/")
	if !ok {
		return "", 0, fmt.Errorf("no '/'")
	}
	u, err := keys.ParseUUID(id)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 {
		return "", 0, fmt.Errorf("attempt index %q", idx)
	}
	return u.String(), n, nil
}
