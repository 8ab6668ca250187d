package unblock

import (
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// The budget and quota checks: each queues an item's next read, and its
// reply's handler queues the item for the call or leaves it blocked.

// checkBudgets queues the reads of every attached budget's limits and
// usage.
func (sc *scan) checkBudgets(it *item) {
	ids, invalid := budgetIDs(it.core["budget_ids"])
	if invalid > 0 {
		sc.t.res.AddError(scannerapi.ErrInvalid, "invalid_budget_id", int64(invalid))
	}
	if len(ids) == 0 {
		sc.next.act = append(sc.next.act, it)
		return
	}
	it.budgets = ids
	sc.next.budget = append(sc.next.budget, it)
}

// addBudgetReads adds an item's budget reads to the wave.
func (sc *scan) addBudgetReads(b *scanutil.Batch, it *item) {
	it.pending = len(it.budgets)
	for _, id := range it.budgets {
		bk := keys.Budget(sc.parts, id)
		b.Add(func(r []scannerapi.Reply) {
			if !it.blocked {
				for _, rr := range r {
					if rr.Failed() {
						class, code := scanutil.ClassifyReply(rr)
						sc.t.fail(it, class, "budget_read_"+code)
						break
					}
				}
				if !it.blocked && breached(r[0], r[1]) {
					it.blocked = true
					sc.t.skip(it, "budget_breached", "budget %s is at a hard limit: it stays blocked until the budget resets or its limit rises", id)
				}
			}
			it.pending--
			if it.pending == 0 && !it.blocked {
				sc.next.act = append(sc.next.act, it)
			}
		}, scannerapi.Command{"HGETALL", bk.Limits()}, scannerapi.Command{"HGETALL", bk.Usage()})
	}
}

// checkQuota queues the quota's definition read (then, in quotaDef, its
// window).
func (sc *scan) checkQuota(it *item) {
	id, ok, invalid := quotaIDOf(it.core["quota_policy_id"])
	if invalid {
		sc.t.res.AddError(scannerapi.ErrInvalid, "invalid_quota_id", 1)
	}
	if !ok {
		sc.next.act = append(sc.next.act, it)
		return
	}
	it.quotaID = id
	sc.next.quotaDef = append(sc.next.quotaDef, it)
}

// addQuotaDefRead adds the read of an item's quota definition.
func (sc *scan) addQuotaDefRead(b *scanutil.Batch, it *item) {
	qk := keys.Quota(sc.parts, it.quotaID)
	b.Add(func(r []scannerapi.Reply) { sc.quotaDef(it, qk, r[0]) },
		append(scannerapi.Command{"HMGET", qk.Definition()}, quotaDefFields...))
}

func (sc *scan) quotaDef(it *item, qk keys.QuotaKeys, r scannerapi.Reply) {
	if r.Failed() {
		class, code := scanutil.ClassifyReply(r)
		sc.t.fail(it, class, "quota_read_"+code)
		return
	}
	q, limited := quotaLimits(r)
	if !limited {
		sc.next.act = append(sc.next.act, it)
		return
	}
	q.keys = qk
	it.quota = &q
	sc.next.quota = append(sc.next.quota, it)
}

// addQuotaWindowReads adds the reads of an item's quota window and
// concurrency.
func (sc *scan) addQuotaWindowReads(b *scanutil.Batch, it *item) {
	q := it.quota
	from := strconv.FormatInt(sc.req.NowMs-q.windowSec*1000, 10)
	b.Add(func(r []scannerapi.Reply) { sc.quotaWindow(it, r[0], r[1]) },
		scannerapi.Command{"ZCOUNT", q.keys.Window("requests_per_window"), "(" + from, "+inf"},
		scannerapi.Command{"GET", q.keys.Concurrency()})
}

func (sc *scan) quotaWindow(it *item, window, concurrency scannerapi.Reply) {
	for _, r := range []scannerapi.Reply{window, concurrency} {
		if r.Failed() {
			class, code := scanutil.ClassifyReply(r)
			sc.t.fail(it, class, "quota_read_"+code)
			return
		}
	}
	switch reason, used, limit := quotaFull(*it.quota, window.Int, concurrency); reason {
	case "quota_window_full":
		sc.t.skip(it, reason, "quota %s: %d of %d requests in its %d s window", it.quotaID, used, limit, it.quota.windowSec)
	case "quota_concurrency_full":
		sc.t.skip(it, reason, "quota %s: %d of %d concurrent admissions in use", it.quotaID, used, limit)
	default:
		sc.next.act = append(sc.next.act, it)
	}
}
