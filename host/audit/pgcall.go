package audit

import (
	"strconv"
	"strings"

	"github.com/ffscan/ffscan/host/shadow"
	"github.com/ffscan/ffscan/keys"
)

// pgExecutionArg maps each action function of ffscan's Postgres library
// (host/postgres ActionFunctions) whose arguments name an execution to
// the index of its bare uuid; the partition key is always argument 0.
// FlowFabric's Postgres tables hold an execution as (partition_key, bare
// uuid), never as the "{fp:N}:uuid" its Valkey keys carry, so a PGCALL
// names no execution the way a Valkey write does. The functions absent
// here name a waitpoint, a budget, a completion event or a worker: their
// entries name no execution.
var pgExecutionArg = map[string]int{
	"expire_lapsed_lease":       1, // partition_key, execution uuid, attempt index
	"release_stale_lease":       1, // partition_key, execution uuid, attempt index
	"expire_execution_deadline": 1, // partition_key, execution uuid
	"promote_delayed":           1, // partition_key, execution uuid
	"expire_suspension":         1, // partition_key, execution uuid, suspension uuid
	"dispatch_sibling_cancels":  2, // partition_key, flow uuid, downstream execution uuid
	"reconcile_sibling_cancels": 2, // partition_key, flow uuid, downstream execution uuid
}

// pgExecutionOf is the execution a PGCALL is about, as "{fp:N}:uuid":
// the partition key is the N of the id's prefix (FlowFabric parses it
// from the id, never recomputes it), so the id is rebuilt exactly.
func pgExecutionOf(d shadow.Decision) string {
	fn, ok := strings.CutPrefix(d.Command, "PGCALL ")
	if !ok {
		return ""
	}
	i, ok := pgExecutionArg[fn]
	if !ok || len(d.Args) <= i {
		return ""
	}
	pk, err := strconv.ParseUint(d.Args[0], 10, 16)
	if err != nil {
		return ""
	}
	id, err := keys.ParseExecutionID(keys.Partition{Family: keys.FamilyFlow, Index: uint16(pk)}.Tag() + ":" + strings.ToLower(d.Args[i]))
	if err != nil {
		return ""
	}
	return id.String()
}
