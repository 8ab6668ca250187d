// Package flowtest drives single executions through the flowfabric library
// for flow tests: claim one named execution, then complete or fail it. It
// calls the library functions directly (one FCALL each, KEYS and ARGV as
// FlowFabric's worker sends them), so DAG tests can finish exactly the
// execution they mean to, in the order they mean to.
package flowtest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/valkey-io/valkey-go"
)

const (
	workerID       = "flowtest-worker"
	workerInstance = "flowtest-instance"
	leaseTTLms     = "60000"
	renewBeforeMs  = "40000" // two thirds of leaseTTLms, as workers renew
)

// Lease is a claimed execution.
type Lease struct {
	ID        keys.ExecutionID
	Lane      string
	LeaseID   string
	Epoch     string
	AttemptID string
	Attempt   uint32
}

// Claim issues a claim grant for id and claims it. The execution must be
// eligible now.
func Claim(ctx context.Context, lib *lua.Library, id keys.ExecutionID) (Lease, error) {
	vk := lib.Client()
	core, err := vk.Do(ctx, vk.B().Hmget().Key(keys.Exec(id).Core()).Field("lane_id", "total_attempt_count").Build()).AsStrSlice()
	if err != nil && !valkey.IsValkeyNil(err) {
		return Lease{}, fmt.Errorf("flowtest: read %s: %w", id, err)
	}
	if len(core) != 2 || core[0] == "" {
		return Lease{}, fmt.Errorf("flowtest: %s has no core", id)
	}
	lane := core[0]
	idx, _ := strconv.ParseUint(core[1], 10, 32)
	ek, pk := keys.Exec(id), keys.FlowPart(id.Partition())
	if err := ok(lib.Do(ctx, lua.Call{
		Function: "ff_issue_claim_grant",
		Keys:     []string{ek.Core(), ek.ClaimGrant(), pk.LaneEligible(lane)},
		Args:     []string{id.String(), workerID, workerInstance, lane, "", "60000", "", "", ""},
	})); err != nil {
		return Lease{}, fmt.Errorf("flowtest: grant %s: %w", id, err)
	}
	l := Lease{ID: id, Lane: lane, LeaseID: keys.NewUUID().String(), AttemptID: keys.NewUUID().String(), Attempt: uint32(idx)}
	i := l.Attempt
	res := lib.Do(ctx, lua.Call{
		Function: "ff_claim_execution",
		Keys: []string{ek.Core(), ek.ClaimGrant(), pk.LaneEligible(lane), pk.LeaseExpiry(),
			pk.WorkerLeases(workerInstance), ek.Attempt(i), ek.AttemptUsage(i), ek.AttemptPolicy(i),
			ek.Attempts(), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(lane), pk.AttemptTimeout(),
			pk.ExecutionDeadline()},
		Args: []string{id.String(), workerID, workerInstance, lane, "", l.LeaseID, leaseTTLms, renewBeforeMs,
			l.AttemptID, "", "", ""},
	})
	f, err := fields(res)
	if err != nil {
		return Lease{}, fmt.Errorf("flowtest: claim %s: %w", id, err)
	}
	l.Epoch = f[1]
	return l, nil
}

// Complete completes a claimed execution with result.
func Complete(ctx context.Context, lib *lua.Library, l Lease, result []byte) error {
	ek, pk := keys.Exec(l.ID), keys.FlowPart(l.ID.Partition())
	return ok(lib.Do(ctx, lua.Call{
		Function: "ff_complete_execution",
		Keys: []string{ek.Core(), ek.Attempt(l.Attempt), pk.LeaseExpiry(), pk.WorkerLeases(workerInstance),
			pk.LaneTerminal(l.Lane), ek.LeaseCurrent(), ek.LeaseHistory(), pk.LaneActive(l.Lane),
			ek.StreamMeta(l.Attempt), ek.Result(), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{l.ID.String(), l.LeaseID, l.Epoch, l.AttemptID, string(result), "worker"},
	}))
}

// Fail fails a claimed execution terminally (no retry policy).
func Fail(ctx context.Context, lib *lua.Library, l Lease, reason string) error {
	ek, pk := keys.Exec(l.ID), keys.FlowPart(l.ID.Partition())
	return ok(lib.Do(ctx, lua.Call{
		Function: "ff_fail_execution",
		Keys: []string{ek.Core(), ek.Attempt(l.Attempt), pk.LeaseExpiry(), pk.WorkerLeases(workerInstance),
			pk.LaneTerminal(l.Lane), pk.LaneDelayed(l.Lane), ek.LeaseCurrent(), ek.LeaseHistory(),
			pk.LaneActive(l.Lane), ek.StreamMeta(l.Attempt), pk.AttemptTimeout(), pk.ExecutionDeadline()},
		Args: []string{l.ID.String(), l.LeaseID, l.Epoch, l.AttemptID, reason, "test", "", "worker"},
	}))
}

// Succeed claims and completes id.
func Succeed(ctx context.Context, lib *lua.Library, id keys.ExecutionID, result []byte) error {
	l, err := Claim(ctx, lib, id)
	if err != nil {
		return err
	}
	return Complete(ctx, lib, l, result)
}

// Flunk claims and fails id terminally.
func Flunk(ctx context.Context, lib *lua.Library, id keys.ExecutionID, reason string) error {
	l, err := Claim(ctx, lib, id)
	if err != nil {
		return err
	}
	return Fail(ctx, lib, l, reason)
}

// Core reads an execution's core hash.
func Core(ctx context.Context, vk valkey.Client, id keys.ExecutionID) (map[string]string, error) {
	return vk.Do(ctx, vk.B().Hgetall().Key(keys.Exec(id).Core()).Build()).AsStrMap()
}

func ok(res valkey.ValkeyResult) error {
	_, err := fields(res)
	return err
}

// fields returns the fields after the status of a {1, status, ...} reply,
// and an error for anything else.
func fields(res valkey.ValkeyResult) ([]string, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range arr {
		if arr[i].IsInt64() {
			n, _ := arr[i].AsInt64()
			out = append(out, strconv.FormatInt(n, 10))
			continue
		}
		s, _ := arr[i].ToString()
		out = append(out, s)
	}
	if len(out) < 2 || out[0] != "1" {
		return nil, fmt.Errorf("library refused: %v", out)
	}
	return out[2:], nil
}
