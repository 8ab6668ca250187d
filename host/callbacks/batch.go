package callbacks

import (
	"context"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/spread"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/valkeyreply"
)

// replyOut takes a batch's replies, in order: Reply values (refusals,
// Postgres) or the client's results and messages. Each returns the
// reply's Size, for the reply budget.
type replyOut interface {
	reply(r *scannerapi.Reply) int64
	result(r valkey.ValkeyResult) int64
	// message is one element of a transaction's reply (reads.go).
	message(m *valkey.ValkeyMessage) int64
	// grow makes room for n bytes of replies about to be given out.
	grow(n int64)
	// replaceLast replaces the reply just taken (its command ran, but the
	// batch's replies passed the budget).
	replaceLast(r *scannerapi.Reply)
}

// sliceOut collects Reply values (linked scanners, and plugins on the
// unary and gRPC stream paths).
type sliceOut struct{ rs []scannerapi.Reply }

func (o *sliceOut) reply(r *scannerapi.Reply) int64 {
	o.rs = append(o.rs, *r)
	return pluginhost.ReplySize(*r)
}

func (o *sliceOut) result(r valkey.ValkeyResult) int64 {
	rep := valkeyreply.Of(r)
	return o.reply(&rep)
}

func (o *sliceOut) message(m *valkey.ValkeyMessage) int64 {
	rep := valkeyreply.OfMessage(m)
	return o.reply(&rep)
}

func (o *sliceOut) replaceLast(r *scannerapi.Reply) { o.rs[len(o.rs)-1] = *r }

func (o *sliceOut) grow(int64) {}

// packedOut writes the replies in the packed form without building Reply
// values for the client's results.
type packedOut struct {
	w    *pluginhost.ReplyWriter
	last pluginhost.ReplyMark
}

func (o *packedOut) reply(r *scannerapi.Reply) int64 {
	o.last = o.w.Mark()
	o.w.Reply(r)
	return pluginhost.ReplySize(*r)
}

func (o *packedOut) result(r valkey.ValkeyResult) int64 {
	o.last = o.w.Mark()
	before := o.w.Size()
	valkeyreply.Write(o.w, r)
	return o.w.Size() - before
}

func (o *packedOut) message(m *valkey.ValkeyMessage) int64 {
	o.last = o.w.Mark()
	before := o.w.Size()
	valkeyreply.WriteMessage(o.w, m)
	return o.w.Size() - before
}

func (o *packedOut) grow(n int64) { o.w.Grow(int(n)) }

func (o *packedOut) replaceLast(r *scannerapi.Reply) {
	o.w.Rewind(o.last)
	o.w.Reply(r)
}

// account is one batch's use of its scanner's reply budget
// (Budget.MaxReplyBytes), which the scanner's batches in flight share.
// Every reply given out counts, refusals included: a plugin that has
// thousands of commands refused must not make the host hold their texts
// unbounded either.
type account struct {
	limit int64         // 0: no bound
	pool  *atomic.Int64 // what the scanner's batches hold (spend.replies)
	held  int64         // what this batch holds of it
	// spent: the replies reached the budget; the batch's later commands
	// are not sent, and get the short spentRefusal.
	spent bool
}

func (a *account) bounded() bool { return a.limit > 0 }

// left is what the scanner's replies may still take.
func (a *account) left() int64 { return a.limit - a.pool.Load() }

// reserve takes n bytes for a reply about to be read (settle gives the
// difference to its real size); false when they do not fit.
func (a *account) reserve(n int64) bool {
	if !a.bounded() {
		return true
	}
	for {
		cur := a.pool.Load()
		if cur+n > a.limit {
			return false
		}
		if a.pool.CompareAndSwap(cur, cur+n) {
			a.held += n
			return true
		}
	}
}

// add counts n more bytes given out (or, negative, freed), and reports
// whether the replies still fit.
func (a *account) add(n int64) bool {
	if !a.bounded() {
		return true
	}
	a.held += n
	if a.pool.Add(n) > a.limit {
		a.spent = true
		return false
	}
	return true
}

// release gives back what the batch held: its replies are on their way
// to the plugin.
func (a *account) release() {
	if a.bounded() {
		a.pool.Add(-a.held)
		a.held = 0
	}
}

// spentRefusal answers every command of a batch after its replies reached
// the budget: short and the same for all, so that a batch of MaxBatch
// commands holds at most MaxBatch of them.
var spentRefusal = refuse(ReasonBudgetReply, "not sent: the batch's replies reached the reply budget").refused

// batch is one Exec call under way.
type batch struct {
	s       *Service
	scanner string
	clk     clock.Clock
	out     replyOut
	acct    account
	anchor  string // the slot keyless commands go with (route)
	budget  int64
}

// exec runs a batch and returns its replies as Reply values.
func (s *Service) exec(ctx context.Context, scanner string, pol Policy, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	out := &sliceOut{rs: make([]scannerapi.Reply, 0, len(cmds))}
	if err := s.run(ctx, scanner, pol, cmds, out); err != nil {
		return nil, err
	}
	return out.rs, nil
}

// run runs a batch and gives out one reply per command, in order.
func (s *Service) run(ctx context.Context, scanner string, pol Policy, cmds []scannerapi.Command, out replyOut) error {
	if err := checkBatch(cmds); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sp, budget, clk := s.spendOf(scanner)
	reason, release := sp.admit(budget, len(cmds), clk.Now())
	if reason != "" {
		s.rec.CallbackRefused(scanner, reason)
		refused := refuse(reason, "the scanner's callback budget is spent (%s); try again later", budgetText(budget)).refused
		for range cmds {
			out.reply(refused)
		}
		return nil
	}
	defer release()
	s.rec.CallbackCommands(scanner, len(cmds))
	ops := make([]op, len(cmds))
	for i, c := range cmds {
		ops[i] = s.check(pol, c)
		if ops[i].refused != nil {
			s.rec.CallbackRefused(scanner, ops[i].reason)
		}
	}
	out = s.audited(out, pol, ops)
	b := &batch{s: s, scanner: scanner, clk: clk, out: out, budget: budget.MaxReplyBytes,
		acct: account{limit: budget.MaxReplyBytes, pool: &sp.replies}}
	defer b.acct.release()
	b.anchor = s.route(ops)
	for i := 0; i < len(ops); {
		switch {
		case b.acct.spent:
			b.giveSpent(len(ops) - i)
			return nil
		case ops[i].refused != nil:
			b.give(ops[i].refused)
			i++
			continue
		}
		j := i
		for j < len(ops) && ops[j].refused == nil && ops[j].segment() == ops[i].segment() {
			j++
		}
		b.segment(ctx, ops[i:j])
		i = j
	}
	return nil
}

// give gives out a reply that needs no server (a refusal, a Postgres
// reply): one that does not fit what is left of the budget is replaced by
// spentRefusal.
func (b *batch) give(r *scannerapi.Reply) {
	if b.acct.bounded() && pluginhost.ReplySize(*r) > b.acct.left() {
		r = spentRefusal
	}
	b.acct.add(b.out.reply(r))
}

// giveSpent refuses the next n commands: the budget is spent.
func (b *batch) giveSpent(n int) {
	for range n {
		b.s.rec.CallbackRefused(b.scanner, ReasonBudgetReply)
		b.acct.add(b.out.reply(spentRefusal))
	}
}

// took accounts for the reply just given out of a command that ran: past
// the budget it is dropped (replaced by a refusal).
func (b *batch) took(size int64) { b.settled(0, size) }

// settled accounts for the reply just given out of a command that ran,
// for which reserved bytes were taken before it was read.
func (b *batch) settled(reserved, size int64) {
	if b.acct.add(size - reserved) {
		return
	}
	dropped := refuse(ReasonBudgetReply, "the command ran but its reply was dropped: the scanner's replies passed %d bytes", b.budget).refused
	b.out.replaceLast(dropped)
	b.acct.add(pluginhost.ReplySize(*dropped) - size)
	b.s.rec.CallbackRefused(b.scanner, ReasonBudgetReply)
}

// segment runs consecutive ops of one segment kind and gives out their
// replies.
func (b *batch) segment(ctx context.Context, ops []op) {
	switch {
	case ops[0].pg != nil:
		replies := make([]scannerapi.Reply, len(ops))
		b.s.runPG(ctx, ops, replies)
		for k := range replies {
			b.took(b.out.reply(&replies[k]))
		}
	case ops[0].isPlain && b.acct.bounded():
		b.plainBounded(ctx, ops)
	case ops[0].isPlain:
		for _, r := range b.pipeline(ctx, ops) {
			b.took(b.out.result(r))
		}
	default:
		// Library calls, read whole and measured after: the functions a
		// plugin may call (the flowfabric library's) answer a status and
		// a few fields; the readers of streams and summaries answer what
		// their arguments bound (a count of entries).
		calls := make([]lua.Call, 0, len(ops))
		for _, o := range ops {
			calls = append(calls, o.call)
		}
		for _, r := range b.s.lib.DoMulti(ctx, calls...) {
			b.took(b.out.result(r))
		}
	}
}

// pipeline sends plain ops in one pipeline (per slot on a cluster: a
// master failing over holds up only the commands of its own slots; a
// SampleBacklog batch spans every partition).
func (b *batch) pipeline(ctx context.Context, ops []op) []valkey.ValkeyResult {
	seg := make(valkey.Commands, 0, len(ops))
	slots := make([]int, 0, len(ops))
	for _, o := range ops {
		seg = append(seg, o.plain)
		slots = append(slots, b.slot(o))
	}
	return spread.DoMulti(ctx, b.clk, b.s.client, seg, slots)
}

// slot is the cluster slot an op goes to.
func (b *batch) slot(o op) int {
	key := b.anchor
	if len(o.keys) > 0 {
		key = o.keys[0]
	}
	return int(keys.ClusterSlot(key))
}
