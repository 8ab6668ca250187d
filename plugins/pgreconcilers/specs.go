package pgreconcilers

import (
	"time"

	"github.com/ffscan/ffscan/keys"
)

// Scanner names.
const (
	AttemptTimeoutName       = "pg_attempt_timeout"
	LeaseExpiryName          = "pg_lease_expiry"
	ExecutionDeadlineName    = "pg_execution_deadline"
	DelayedPromoterName      = "pg_delayed_promoter"
	PendingWPExpiryName      = "pg_pending_wp_expiry"
	SuspensionTimeoutName    = "pg_suspension_timeout"
	BudgetResetName          = "pg_budget_reset"
	DependencyName           = "pg_dependency"
	EdgeCancelDispatcherName = "pg_edge_cancel_dispatcher"
	EdgeCancelReconcilerName = "pg_edge_cancel_reconciler"
	WorkerRegistrySweepName  = "pg_worker_registry_ttl_sweep"
)

const (
	// defaultBatch is FlowFabric's LIMIT for its partition reconcilers,
	// budgetBatch its budget_reset's (postgres.md §5).
	defaultBatch = 1000
	budgetBatch  = 20
	cancelBatch  = 50
	// maxBudgetIDLength bounds a budget id read as a candidate.
	maxBudgetIDLength = 256
	flowFamily        = keys.FamilyFlow
)

// NewAttemptTimeout is FlowFabric's attempt_timeout (postgres.md §4.2,
// §7.2): a lapsed lease of an active execution is retried while the
// execution's attempt_index is below its retry_policy.max_retries, else
// the execution ends with an "expired" completion. It is the one owner of
// those lapses (PG3) and fences the lost lease (PG4).
func NewAttemptTimeout() *Reconciler {
	return newReconciler(spec{name: AttemptTimeoutName, family: flowFamily, interval: 2 * time.Second, batch: defaultBatch,
		candidates: "lapsed_leases", action: "expire_lapsed_lease", args: attemptArgs, done: []string{"retried", "terminal"}})
}

// NewLeaseExpiry is FlowFabric's lease_expiry (postgres.md §4.1) for the
// lapsed leases of executions that are not active: the lease is cleared
// (and fenced) with a lease event. The lapses of active executions are
// attempt_timeout's, so that a retry is counted for each (PG3).
func NewLeaseExpiry() *Reconciler {
	return newReconciler(spec{name: LeaseExpiryName, family: flowFamily, interval: 1500 * time.Millisecond, batch: defaultBatch,
		candidates: "stale_leases", action: "release_stale_lease", args: attemptArgs, done: []string{"released"}})
}

// NewExecutionDeadline ends active executions whose deadline passed
// (postgres.md §4.4), which FlowFabric never schedules (PG1).
func NewExecutionDeadline() *Reconciler {
	return newReconciler(spec{name: ExecutionDeadlineName, family: flowFamily, interval: 5 * time.Second, batch: defaultBatch,
		candidates: "deadlines_passed", action: "expire_execution_deadline", args: uuidArgs, done: []string{"expired"}})
}

// NewDelayedPromoter makes delayed executions eligible when their delay
// passed (postgres.md §4.5), which FlowFabric never schedules (PG1).
func NewDelayedPromoter() *Reconciler {
	return newReconciler(spec{name: DelayedPromoterName, family: flowFamily, interval: 750 * time.Millisecond, batch: defaultBatch,
		candidates: "delays_due", action: "promote_delayed", args: uuidArgs, done: []string{"promoted"}})
}

// NewPendingWPExpiry closes pending waitpoints past their expiry
// (postgres.md §4.6), which FlowFabric never schedules (PG1); waitpoints a
// suspension activated are left to suspension_timeout.
func NewPendingWPExpiry() *Reconciler {
	return newReconciler(spec{name: PendingWPExpiryName, family: flowFamily, interval: 5 * time.Second, batch: defaultBatch,
		candidates: "waitpoints_expired", action: "expire_pending_waitpoint", args: uuidArgs, done: []string{"expired"}})
}

// NewSuspensionTimeout applies suspension timeouts (postgres.md §4.3) to
// the suspension each was read for, while its execution is suspended
// (PG8), with the behaviour as it is under the row lock (PG9).
func NewSuspensionTimeout() *Reconciler {
	return newReconciler(spec{name: SuspensionTimeoutName, family: flowFamily, interval: 2 * time.Second, batch: defaultBatch,
		candidates: "suspensions_timed_out", action: "expire_suspension", args: twoUUIDs, done: []string{"terminal", "timeout_signal"}})
}

// NewBudgetReset resets budgets whose scheduled reset came (postgres.md
// §4.7), on budget partitions.
func NewBudgetReset() *Reconciler {
	return newReconciler(spec{name: BudgetResetName, family: keys.FamilyBudget, interval: 15 * time.Second, batch: budgetBatch,
		candidates: "budgets_due", action: "reset_budget", args: budgetArgs, done: []string{"reset"}})
}

// NewDependency is the safety net of DAG dispatch (postgres.md §4.8):
// completion events still undispatched 15 s after their commit have every
// outgoing edge advanced and are marked dispatched, in one transaction
// (PG10). The host's completion listener dispatches each event when it is
// committed; this finds what the listener missed.
func NewDependency() *Reconciler {
	return newReconciler(spec{name: DependencyName, family: flowFamily, interval: 15 * time.Second, batch: defaultBatch,
		candidates: "completions_undispatched", action: "dispatch_completion", args: eventArgs, done: []string{"dispatched"}})
}

// NewEdgeCancelDispatcher cancels the siblings an any_of or quorum group
// with cancel_remaining no longer needs (postgres.md §4.9).
func NewEdgeCancelDispatcher() *Reconciler {
	return newReconciler(spec{name: EdgeCancelDispatcherName, family: flowFamily, interval: time.Second, batch: cancelBatch,
		candidates: "cancel_groups_pending", action: "dispatch_sibling_cancels", args: twoUUIDs, done: []string{"dispatched", "orphaned"}})
}

// NewEdgeCancelReconciler clears pending sibling cancels that are done or
// stale; it never cancels (postgres.md §4.10).
func NewEdgeCancelReconciler() *Reconciler {
	return newReconciler(spec{name: EdgeCancelReconcilerName, family: flowFamily, interval: 10 * time.Second, batch: cancelBatch,
		candidates: "cancel_groups_pending", action: "reconcile_sibling_cancels", args: twoUUIDs, done: []string{"completed_drain", "sremmed_stale"}})
}

// NewWorkerRegistrySweep deletes worker registrations whose heartbeat is
// older than their TTL, with a ttl_swept event (postgres.md §4.11). The
// registry's 256 partitions are spread over the host's flow partitions.
func NewWorkerRegistrySweep() *Reconciler {
	return newReconciler(spec{name: WorkerRegistrySweepName, family: flowFamily, interval: 30 * time.Second, batch: defaultBatch,
		candidates: "workers_expired", action: "sweep_worker", args: workerArgs, done: []string{"swept"}})
}

// All returns every Postgres reconciler, as the plugin serves them.
func All() []*Reconciler {
	return []*Reconciler{NewAttemptTimeout(), NewLeaseExpiry(), NewExecutionDeadline(), NewDelayedPromoter(),
		NewPendingWPExpiry(), NewSuspensionTimeout(), NewBudgetReset(), NewDependency(), NewEdgeCancelDispatcher(),
		NewEdgeCancelReconciler(), NewWorkerRegistrySweep()}
}
