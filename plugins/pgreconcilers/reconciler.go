// Package pgreconcilers holds the reconcilers of FlowFabric's Postgres
// backend (postgres.md §4) as ffscan scanners. They read candidates through
// the host (ffscan's candidate functions, every partition of a cycle in one
// query) and act through PGCALLs of ffscan's action functions, each one
// transaction that locks its rows, re-checks and acts or does nothing. The
// decisions are in the database (host/postgres/sql/library.sql); a
// scanner here says what to read, what to call for each candidate and
// which replies count as work done.
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
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Version is the scanners' version.
const Version = "1.0.0"

// spec is one reconciler.
type spec struct {
	name     string
	family   keys.Family
	interval time.Duration
	batch    int
	// candidates is the candidate function, action the action function.
	candidates, action string
	// args turns a candidate member into the action's arguments after the
	// partition key.
	args func(member string) ([]string, error)
	// done are the replies that mean the reconciler changed something;
	// every other success is a no-op the function chose after its
	// re-check.
	done []string
}

// Reconciler is one Postgres reconciler. Its methods are safe for
// concurrent use by different partitions.
type Reconciler struct {
	sp       spec
	failures *scannerapi.FailureTracker
}

func newReconciler(sp spec) *Reconciler {
	return &Reconciler{sp: sp, failures: scannerapi.NewFailureTracker()}
}

// Info implements scannerapi.Scanner.
func (r *Reconciler) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:            r.sp.name,
		Version:         Version,
		APIVersion:      scannerapi.APIVersion,
		Family:          r.sp.family,
		DefaultInterval: r.sp.interval,
		DefaultBatch:    r.sp.batch,
		Sources: []scannerapi.CandidateSource{{
			Name:    r.sp.candidates,
			Kind:    scannerapi.SourcePostgres,
			Key:     r.sp.candidates,
			Backlog: scannerapi.BacklogDue,
		}},
		Functions: []string{"pg:" + r.sp.action},
	}
}

// Configure implements scannerapi.Scanner. The reconcilers take no
// options. Their namespace / instance-tag filter is the host's, one for
// every reconciler of the database (postgres.namespace,
// postgres.instance_tag), so that none can act outside it.
func (r *Reconciler) Configure(ctx context.Context, options map[string]string) error {
	for _, o := range []string{scannerapi.OptionNamespace, scannerapi.OptionInstanceTag} {
		if _, ok := options[o]; ok {
			return fmt.Errorf("option %s: the Postgres reconcilers share the host's filter; set postgres.%s instead", o, o)
		}
	}
	_, err := scanutil.ParseOptions(nil, options)
	return err
}

// parse reads a candidate member as the action's arguments (after the
// partition key): a member of another form is invalid.
func (r *Reconciler) parse(member string, _ keys.Partition) ([]string, keys.IDForm) {
	args, err := r.sp.args(member)
	if err != nil {
		return nil, keys.IDInvalid
	}
	return args, keys.IDCanonical
}

// intake is the reconciler's rule for candidates, the scan's and
// Explain's.
func (r *Reconciler) intake() scanutil.Intake[[]string] {
	return scanutil.Intake[[]string]{Parse: r.parse, Failures: r.failures}
}

// chunk bounds the PGCALLs of one callback.
const chunk = 500

// ScanPartition implements scannerapi.Scanner.
func (r *Reconciler) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	if req.Partition.Family != r.sp.family {
		return nil, fmt.Errorf("partition %s is not of the %s family", req.Partition, r.sp.family)
	}
	res := &scannerapi.ScanResult{}
	log := scannerapi.Logger(ctx)
	pk := strconv.Itoa(int(req.Partition.Index))
	var b scanutil.Batch
	in := r.intake().Begin(ctx, req, res)
	for _, c := range req.Candidates {
		args, v := in.Admit(c)
		if v == scanutil.Leave {
			// The host's candidate function wrote it: not data to act on.
			_, err := r.sp.args(c.Member)
			log.Warn("candidate member has not the form the reconciler expects", "member", c.Member, "error", err)
		}
		if v != scanutil.Take {
			continue
		}
		item := c.Member
		if req.DryRun {
			// The decision is the database's, under the row lock; a dry
			// run can only say what it would hand it.
			res.Processed++
			res.Note("would call %s for %s", r.sp.action, item)
			continue
		}
		b.Add(func(rs []scannerapi.Reply) { r.record(res, req.Cycle, item, rs[0], log) },
			scannerapi.PGCall(r.sp.action, append([]string{pk}, args...)...))
	}
	if err := b.ExecChunked(ctx, host, chunk); err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	return res, nil
}

// record accounts for one action's reply.
func (r *Reconciler) record(res *scannerapi.ScanResult, cycle uint64, item string, reply scannerapi.Reply, log interface {
	Error(string, ...any)
}) {
	switch o := classifyAction(reply, r.sp.done); o.kind {
	case outFailed:
		res.AddError(o.class, o.code, 1)
		if r.failures.RecordFailureClass(item, cycle, o.class) {
			log.Error("persistent failure; skipping the item for a while", "item", item, "function", r.sp.action,
				"class", o.class, "code", o.code, "backoff_cycles", scannerapi.DefaultBackoffCycles)
		}
	case outRefused:
		res.AddError(o.class, o.code, 1)
		r.failures.RecordFailureClass(item, cycle, o.class)
	case outDone:
		r.failures.RecordSuccess(item)
		res.Processed++
	case outLeft:
		// Renewed, released, replaced or no longer due since the read:
		// the function re-checked and left it.
		r.failures.RecordSuccess(item)
		res.Skipped++
	}
}
