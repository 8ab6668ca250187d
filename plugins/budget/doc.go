// Package budget holds the two budget-family scanners of the budget plugin
// (one binary serving both, see plugins/budget):
//
//   - budget_reset (scanners.md 9.1) zeroes the usage of budgets whose reset
//     time has come, through ff_reset_budget, which also reschedules them
//     (or unschedules a budget whose reset_interval_ms is 0);
//   - budget_reconciler (9.2) keeps the breached_at marker of lifetime
//     (non-resetting) budgets in line with their usage, and prunes ids whose
//     definition is gone from the partition's indexes.
//
// Neither applies the execution filter: budgets have no namespace or tags
// (FlowFabric accepts the filter for them and ignores it; we do not declare
// its options at all).
//
// # budget_reset
//
// Source: zset_due ff:idx:{b:M}:budget_resets (score = next reset time),
// batch 20, interval 15 s, backlog = due entries. For the due head the host
// passes, one Exec carries, per budget, an HGET of the definition's
// budget_id (to tell a live budget from an orphan index entry) followed by
// its ff_reset_budget FCALL (KEYS definition, usage, resets index; ARGV id,
// the host's server-time now). Members that are not budget ids in any
// spelling are removed with ZREM in the same Exec and counted (class
// invalid, code invalid_member): FlowFabric leaves them in place, where
// enough of them hide every due budget behind them (pitfall P3). A uuid in a
// non-canonical spelling is removed the same way (code
// non_canonical_member): FlowFabric canonicalises it, resets the canonical
// budget and reschedules the canonical member, so the odd spelling stayed
// due and was reset again every cycle.
//
// Replies are classified: {1, OK, next} is processed (next "0" means the
// budget no longer resets and the function removed it from the index);
// {0, code} is counted as class lua with its code; a failed command
// (transport, WRONGTYPE inside the script, refused) is counted by class and
// feeds a FailureTracker keyed by budget id: after three consecutive
// failures the id is skipped for ten cycles (a batch in which every command
// got no reply is an outage and does not count against any budget). When the host's window is full
// and some of it was skipped that way, the same Exec also reads up to
// "lookahead" due entries past the window, and a second Exec resets as
// many of those as there were skipped entries, so a pile of poison entries
// does not stall the partition.
//
// A due id whose definition is gone is counted (class invalid, code
// definition_missing). The library does not check for the definition, so
// its FCALL has by then removed the index entry (interval 0) and left a
// definition hash holding only the reset bookkeeping (reset_count,
// last_reset_at...). Removing that stray hash safely needs the check inside
// the library function; until then it is reported, not repaired.
//
// Options: lookahead (int, default 100; 0 turns it off).
//
// Dry run: one Exec of HMGET definition budget_id reset_interval_ms per
// budget; nothing is written; Processed counts the budgets that would be
// reset, and Notes say what would happen to each.
//
// # budget_reconciler
//
// Source: set_scan ff:idx:{b:M}:budget_policies (every budget homed on the
// partition), one SSCAN step of COUNT batch per partition per cycle with
// the cursor kept by the host, interval 30 s, batch 100, backlog = set
// size. For the ids of the step, ONE Exec reads everything: HGETALL of the
// definition, the usage and the limits of each budget (members that are
// not budget ids in any spelling are removed with SREM in the same Exec,
// class invalid, code invalid_member; a uuid in a non-canonical spelling is
// counted, code non_canonical_member, and left, since it may name keys
// someone else wrote). Then per budget (decideBudget):
//
//   - definition gone (empty) → orphan: SREM the id from budget_policies
//     and ZREM it from budget_resets (FlowFabric prunes only the first;
//     the second would otherwise make budget_reset recreate a stray
//     definition when it falls due);
//   - reset_interval_ms other than "" and "0" → a resetting budget, left
//     alone;
//   - no limits → nothing to do;
//   - some hard:<dim> limit > 0 with usage strictly greater, and no
//     breached_at → HSETNX usage breached_at <server time now>; not
//     breached and breached_at present → HDEL usage breached_at.
//
// Writes go in a second Exec, only when there is something to write. A read
// that fails (WRONGTYPE, transport) is counted by class (code "wrongtype"
// for a WRONGTYPE key, else read_definition / read_usage / read_limits)
// and the budget is left untouched: a failed definition read is never
// taken for a deleted budget.
//
// Processed counts markers set or cleared (the HSETNX/HDEL took effect)
// plus orphans pruned; Skipped counts resetting budgets and budgets
// without limits. More is reported when the SSCAN step was full, so the
// host sweeps a large set in one cycle's follow-ups rather than one step
// per interval.
//
// Options: prune_orphans (bool, default true).
//
// Dry run: the read Exec only (garbage members are not removed); Notes say
// what would be written.
package budget
