package timers

import (
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Scanner names (FlowFabric's: operators read them in metrics and config).
const (
	AttemptTimeoutName    = "attempt_timeout"
	ExecutionDeadlineName = "execution_deadline"
	SuspensionTimeoutName = "suspension_timeout"
	PendingWPExpiryName   = "pending_wp_expiry"
	DelayedPromoterName   = "delayed_promoter"
)

// NewAttemptTimeout returns attempt_timeout (scanners.md §7.2): attempts
// past their timeout end the execution as expired.
func NewAttemptTimeout() *Timer {
	sp := expireSpec(AttemptTimeoutName, 2*time.Second, "attempt_timeout")
	sp.coreReads = append(sp.coreReads, "lifecycle_phase", "ownership_state", "current_lease_id",
		"current_lease_epoch", "current_attempt_id", "retry_count")
	sp.alsoCalls = []string{"ff_fail_execution"}
	sp.verb = "time out"
	expire := sp.call
	sp.call = func(sc *scan, it *item) (scannerapi.Command, string) {
		retry, left := retriesLeft(it.extra["policy"], it.core["retry_count"])
		switch {
		case it.core["lifecycle_phase"] != "active" || !left:
			return expire(sc, it) // ended, or no retry left: expired
		case it.core["ownership_state"] != "leased":
			// Its lease expired or was revoked: reclaim retries it (and
			// re-arms the timeout); the entry stays until then.
			return nil, ""
		}
		lane, why := coreLane(it)
		if why != "" {
			return nil, why
		}
		it.retry = retry
		ek, pk := keys.Exec(it.eid), sc.pk
		idx := attemptIndex(it.core["current_attempt_index"])
		// The attempt fails as if its worker had failed it (fenced by its
		// own lease), and the retry policy schedules the next attempt.
		return scannerapi.FCall("ff_fail_execution",
			[]string{ek.Core(), ek.Attempt(idx), pk.LeaseExpiry(), pk.WorkerLeases(it.core["current_worker_instance_id"]),
				pk.LaneTerminal(lane), pk.LaneDelayed(lane), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(lane),
				ek.StreamMeta(idx), pk.AttemptTimeout(), pk.ExecutionDeadline()},
			it.eid.String(), it.core["current_lease_id"], it.core["current_lease_epoch"], it.core["current_attempt_id"],
			"attempt_timeout", "timeout", retry, ""), ""
	}
	expireClassify := sp.classify
	sp.classify = func(it *item, r scannerapi.Reply) outcome {
		if it.retry == "" {
			return expireClassify(it, r)
		}
		fr, err := scannerapi.ParseFunctionReply(r)
		switch {
		case err != nil:
			return failedOutcome(err)
		case fr.Success && (fr.Field(0) == "retry_scheduled" || fr.Field(0) == "terminal_failed"):
			return outcome{kind: outActed, code: fr.Field(0)}
		case !fr.Success && leaseMovedOn[fr.Code]:
			// The lease ended or changed hands since the read: whoever
			// holds the execution now owns it.
			return outcome{kind: outStuck, code: fr.Code}
		case !fr.Success:
			return outcome{kind: outLuaError, class: scannerapi.ErrLua, code: fr.Code}
		}
		return outcome{kind: outFailed, class: scannerapi.ErrServer, code: "unexpected_status"}
	}
	return newTimer(sp)
}

// NewExecutionDeadline returns execution_deadline (§7.3): executions past
// their deadline, running or not, end as expired.
func NewExecutionDeadline() *Timer {
	return newTimer(expireSpec(ExecutionDeadlineName, 5*time.Second, "execution_deadline"))
}

// expireSpec is the shared shape of the two ff_expire_execution scanners;
// reason is both the index name and the expiry reason.
func expireSpec(name string, interval time.Duration, reason string) spec {
	return spec{
		name: name, interval: interval, batch: 50,
		source: reason, key: "ff:idx:{p}:" + reason, members: execMember,
		function: "ff_expire_execution", verb: "expire (" + reason + ")",
		coreReads:    []string{"execution_id", "lane_id", "current_attempt_index", "current_worker_instance_id"},
		recheckScore: true,
		call: func(sc *scan, it *item) (scannerapi.Command, string) {
			lane, why := coreLane(it)
			if why != "" {
				return nil, why
			}
			ek, pk := keys.Exec(it.eid), sc.pk
			idx := attemptIndex(it.core["current_attempt_index"])
			return scannerapi.FCall("ff_expire_execution",
				[]string{ek.Core(), ek.Attempt(idx), ek.StreamMeta(idx), ek.LeaseCurrent(), ek.LeaseHistory(),
					pk.LeaseExpiry(), pk.WorkerLeases(it.core["current_worker_instance_id"]), pk.LaneActive(lane),
					pk.LaneTerminal(lane), pk.AttemptTimeout(), pk.ExecutionDeadline(), pk.LaneSuspended(lane),
					pk.SuspensionTimeout(), ek.SuspensionCurrent()},
				it.eid.String(), reason), ""
		},
		classify: statusClassifier(map[string]outKind{
			"expired": outActed, "not_found_cleaned": outCleaned, "already_terminal": outCleaned,
		}),
	}
}

// NewSuspensionTimeout returns suspension_timeout (§7.4): suspensions past
// their timeout get their timeout behaviour (fail, cancel, expire,
// auto-resume or escalate).
func NewSuspensionTimeout() *Timer {
	return newTimer(spec{
		name: SuspensionTimeoutName, interval: 2 * time.Second, batch: 50,
		source: "suspension_timeout", key: "ff:idx:{p}:suspension_timeout", members: execMember,
		function: "ff_expire_suspension", verb: "apply the suspension timeout of",
		coreReads: []string{"execution_id", "lane_id", "current_attempt_index", "current_waitpoint_id"},
		call: func(sc *scan, it *item) (scannerapi.Command, string) {
			lane, why := coreLane(it)
			if why != "" {
				return nil, why
			}
			// P18: the core's waitpoint, else the suspension's own; never
			// an empty id (FlowFabric would write ff:wp:<tag>: hashes).
			wp := it.core["current_waitpoint_id"]
			if wp == "" {
				wp = it.extra["waitpoint_id"]
			}
			wpid, err := keys.ParseUUID(wp)
			open := it.extra["suspension_id"] != "" && it.extra["closed_at"] == ""
			if err != nil && it.core["execution_id"] != "" && open {
				// An open suspension with no waitpoint to close: leave it
				// for an operator rather than write stray hashes.
				return nil, "no_waitpoint"
			}
			// Otherwise the function answers (a stale entry, cleaned)
			// before it uses the waitpoint keys: the nil id is a
			// placeholder.
			ek, pk := keys.Exec(it.eid), sc.pk
			idx := attemptIndex(it.core["current_attempt_index"])
			return scannerapi.FCall("ff_expire_suspension",
				[]string{ek.Core(), ek.SuspensionCurrent(), pk.Waitpoint(wpid), pk.WaitpointCondition(wpid),
					ek.Attempt(idx), ek.StreamMeta(idx), pk.SuspensionTimeout(), pk.LaneSuspended(lane),
					pk.LaneTerminal(lane), pk.LaneEligible(lane), pk.LaneDelayed(lane), ek.LeaseHistory()},
				it.eid.String()), ""
		},
		classify: func(it *item, r scannerapi.Reply) outcome {
			o := statusClassifier(map[string]outKind{
				"auto_resume": outActed, "escalate": outActed, "fail": outActed, "cancel": outActed, "expire": outActed,
				"not_found_cleaned": outCleaned, "not_suspended_cleaned": outCleaned,
				"no_active_suspension_cleaned": outCleaned, "not_yet_due": outStuck,
			})(it, r)
			if o.kind == outFailed && o.code == "unexpected_status" {
				// Any other behaviour name is applied as fail by the
				// library: still an expiry.
				if fr, err := scannerapi.ParseFunctionReply(r); err == nil && fr.Success && fr.Field(0) == "failed" {
					return outcome{kind: outActed, code: fr.Status}
				}
			}
			return o
		},
	})
}

// NewPendingWPExpiry returns pending_wp_expiry (§7.5): pending waitpoints
// no suspension used before they expired are closed (never_committed).
func NewPendingWPExpiry() *Timer {
	return newTimer(spec{
		name: PendingWPExpiryName, interval: 5 * time.Second, batch: 100,
		source: "pending_waitpoint_expiry", key: "ff:idx:{p}:pending_waitpoint_expiry", members: waitpointMember,
		function: "ff_close_waitpoint", verb: "close the pending waitpoint",
		call: func(sc *scan, it *item) (scannerapi.Command, string) {
			core := sc.pk.Noop() // the function does not read it
			if !it.eid.IsZero() {
				core = keys.Exec(it.eid).Core()
			}
			return scannerapi.FCall("ff_close_waitpoint",
				[]string{core, sc.pk.Waitpoint(it.wpid), it.index}, it.wpid.String(), "never_committed"), ""
		},
		classify: func(_ *item, r scannerapi.Reply) outcome {
			fr, err := scannerapi.ParseFunctionReply(r)
			if err != nil {
				return failedOutcome(err)
			}
			switch {
			case !fr.Success && fr.Code == "waitpoint_not_found":
				return outcome{kind: outRemove, code: fr.Code}
			case !fr.Success:
				return outcome{kind: outLuaError, class: scannerapi.ErrLua, code: fr.Code}
			case fr.Field(0) == "already_closed":
				return outcome{kind: outStuck, code: "already_closed"}
			case fr.Status == scannerapi.StatusOK && fr.Field(0) == "":
				return outcome{kind: outActed}
			}
			return outcome{kind: outFailed, class: scannerapi.ErrServer, code: "unexpected_status"}
		},
	})
}

// NewDelayedPromoter returns delayed_promoter (§7.6): executions whose
// delay (retry backoff, a worker's delay, a resume delay) has passed
// become eligible.
func NewDelayedPromoter() *Timer {
	return newTimer(spec{
		name: DelayedPromoterName, interval: 750 * time.Millisecond, batch: 50,
		source: "delayed", key: "ff:idx:{p}:lane:{lane}:delayed", members: execMember,
		function: "ff_promote_delayed", verb: "promote",
		call: func(sc *scan, it *item) (scannerapi.Command, string) {
			return scannerapi.FCall("ff_promote_delayed",
				[]string{keys.Exec(it.eid).Core(), it.index, sc.pk.LaneEligible(it.lane)},
				it.eid.String(), strconv.FormatInt(sc.req.NowMs, 10)), ""
		},
		classify: statusClassifier(map[string]outKind{
			"promoted": outActed, "not_found_cleaned": outCleaned, "not_runnable_cleaned": outCleaned,
			"not_delayed_cleaned": outCleaned, "not_yet_due": outStuck,
		}),
	})
}
