package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/valkey-io/valkey-go"
)

// PartitionScanChunk is how many partitions one ClaimNext looks at
// (FlowFabric's chunk): idle load stays O(chunk) per poll, and the cursor
// covers every partition once per ceil(partitions/chunk) polls.
const PartitionScanChunk = 32

// reclaimScanLimit bounds the expired leases read per partition and poll.
// More than one, so a few entries this worker cannot take (other lanes,
// not yet marked) do not hide the rest.
const reclaimScanLimit = 8

// ClaimNext claims one execution, or returns (nil, nil) when the partitions
// it looked at had nothing for it. It never waits: with every permit held
// it returns ErrWorkerAtCapacity.
//
// One call takes the next lane (round-robin) and that lane's next chunk of
// PartitionScanChunk partitions from a cursor seeded per instance, reads
// their eligible heads and due lease-expiry entries in one pipelined round
// trip, then prefers reclaiming an execution whose lease expired (a
// crashed worker's; it must already be marked lease_expired_reclaimable)
// and otherwise claims the best eligible one (highest priority, then
// oldest) of the whole chunk.
func (w *Worker) ClaimNext(ctx context.Context) (*Task, error) {
	if err := w.tryAcquire(); err != nil {
		return nil, err
	}
	t, err := w.claimNext(ctx)
	if t == nil {
		w.release()
	}
	return t, err
}

// candidate is an eligible-set head found by the scan.
type candidate struct {
	id    keys.ExecutionID
	score float64
	order int // scan order, to break score ties deterministically
}

// claimNext does ClaimNext's work while the caller holds a permit.
func (w *Worker) claimNext(ctx context.Context) (*Task, error) {
	lane := w.opts.Lanes[(w.laneIdx.Add(1)-1)%uint64(len(w.opts.Lanes))]
	eligible, expired, err := w.scanChunk(ctx, lane)
	if err != nil {
		return nil, err
	}
	if len(expired) > 0 {
		if t, err := w.reclaimAny(ctx, expired); t != nil || err != nil {
			return t, err
		}
	}
	for _, c := range eligible {
		t, err := w.tryClaim(ctx, c.id, lane)
		switch {
		case t != nil:
			return t, nil
		case err == nil:
		case claimRetryable(err):
			w.log.Debug("claim skipped", "execution_id", c.id, "error", err)
		default:
			return nil, err
		}
	}
	return nil, nil
}

// scanChunk reads, for the next chunk of partitions, the lane's best
// eligible execution and the due lease-expiry entries, in one round trip.
func (w *Worker) scanChunk(ctx context.Context, lane string) ([]candidate, []keys.ExecutionID, error) {
	vk := w.c.vk
	n := uint64(w.c.parts.Flow)
	chunk := min(uint64(PartitionScanChunk), n)
	start := (w.cursors[lane].Add(chunk) - chunk) % n
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	cmds := make(valkey.Commands, 0, 2*chunk)
	for i := uint64(0); i < chunk; i++ {
		pk := keys.FlowPart(keys.Partition{Family: keys.FamilyFlow, Index: uint16((start + i) % n)})
		cmds = append(cmds,
			vk.B().Zrangebyscore().Key(pk.LaneEligible(lane)).Min("-inf").Max("+inf").Withscores().Limit(0, 1).Build(),
			vk.B().Zrangebyscore().Key(pk.LeaseExpiry()).Min("-inf").Max(now).Limit(0, reclaimScanLimit).Build())
	}
	var eligible []candidate
	var expired []keys.ExecutionID
	for i, r := range vk.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return nil, nil, fmt.Errorf("worker: scan partitions: %w", err)
		}
		if i%2 == 0 {
			zs, err := r.AsZScores()
			if err != nil {
				return nil, nil, fmt.Errorf("worker: scan partitions: %w", err)
			}
			for _, z := range zs {
				if id, ok := w.parseIndexedID(z.Member); ok {
					eligible = append(eligible, candidate{id: id, score: z.Score, order: i})
				}
			}
			continue
		}
		members, err := r.AsStrSlice()
		if err != nil {
			return nil, nil, fmt.Errorf("worker: scan partitions: %w", err)
		}
		for _, m := range members {
			if id, ok := w.parseIndexedID(m); ok {
				expired = append(expired, id)
			}
		}
	}
	sort.Slice(eligible, func(i, j int) bool {
		if eligible[i].score != eligible[j].score {
			return eligible[i].score < eligible[j].score
		}
		return eligible[i].order < eligible[j].order
	})
	return eligible, expired, nil
}

// parseIndexedID parses an index member. A member that is not a canonical
// execution id cannot be claimed safely (its keys would be guessed), so it
// is skipped and logged; the index reconciler owns such entries.
func (w *Worker) parseIndexedID(s string) (keys.ExecutionID, bool) {
	id, err := keys.ParseExecutionID(s)
	if err != nil {
		w.log.Warn("skipping unparsable execution id in an index", "member", s, "error", err)
		return keys.ExecutionID{}, false
	}
	return id, true
}

// claimRetryable lists the library verdicts that mean "someone else got
// there first or the index was stale": the candidate is skipped and the
// scan moves on. Anything else (bad capabilities, invalid input,
// corruption) is a configuration or data problem the caller must see.
func claimRetryable(err error) bool {
	for _, s := range []error{
		ErrExecutionNotFound, ErrExecutionNotEligible, ErrExecutionNotInEligibleSet,
		ErrExecutionNotLeaseable, ErrLeaseConflict, ErrGrantAlreadyExists, ErrInvalidClaimGrant, ErrClaimGrantExpired,
		ErrActiveAttemptExists, ErrNotAResumedExecution, ErrUseClaimResumedExecution,
		ErrExecutionNotReclaimable, ErrCapabilityMismatch, ErrMaxRetriesExhausted,
	} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
