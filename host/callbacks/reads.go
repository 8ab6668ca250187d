package callbacks

import (
	"context"
	"errors"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// What one batch can make the host hold.
//
// valkey-go reads every reply whole before it hands it over, so a budget
// checked after the replies were read (as it was) bounds nothing: one
// batch of 64 GETs of a 60 MB value held 3.8 GB. DoStream streams a
// reply, but only a string reply (an array is read whole before it is
// refused), on a connection of its own per pipeline, and the server
// would still produce (and buffer, in its own memory) every value asked
// for. So the host asks first: before a read whose reply its arguments do
// not bound, it asks the server how big the reply is (a probe), and sends
// only the reads that fit what is left of the batch's budget; a read that
// would not fit is refused without being read, a value larger than the
// budget included.
//
// A probe and its read must see the same value, or a write between them
// (the plugin's own, from another batch) would make a read of a small
// value return a large one, 64 times in a pipeline. So the probes run
// under WATCH of the keys read, and the reads in MULTI/EXEC on the same
// connection: when a watched key changed, EXEC runs nothing and the host
// probes again (three times, then the reads fail as transport errors, to
// be retried next cycle).
//
// The probes: STRLEN and HSTRLEN give a value's size exactly (GET, HGET,
// MGET, HMGET); MEMORY USAGE ... SAMPLES 0 a whole collection's (HGETALL,
// HKEYS, HVALS, SMEMBERS: the probe costs what the read costs). A range
// (ZRANGE, LRANGE, XRANGE, the SCANs, SRANDMEMBER) reads part of a
// collection the host cannot measure without reading all of it: when the
// collection is small (a compact encoding, which MEMORY USAGE measures
// exactly) it is probed like a whole one; a large one is read alone, on a
// round trip of its own, and measured after. So what one batch holds is
// at most the budget plus one such reply; a scanner reading a page of a
// large index pays a round trip for it.

// readKind says how large a plain command's reply can be before it is
// read.
type readKind uint8

const (
	// readBounded: its arguments bound its reply (a count, a score, OK).
	readBounded readKind = iota
	// readValues: values whose sizes STRLEN and HSTRLEN give.
	readValues
	// readWhole: a whole collection, which MEMORY USAGE measures.
	readWhole
	// readRange: part of a collection.
	readRange
)

// maxValueProbes bounds the probes of one HMGET or MGET; one that names
// more fields is probed as a whole hash (HMGET) or read alone (MGET).
const maxValueProbes = 256

// watchAttempts is how often the host probes a run again after a key it
// watched changed.
const watchAttempts = 3

// compactEncodings are the encodings whose MEMORY USAGE is exact (one
// allocation, no sampling): small collections.
var compactEncodings = map[string]bool{"listpack": true, "ziplist": true, "intset": true}

// sized reports whether an op is a read the host probes before it sends
// it.
func (o op) sized() bool { return o.read != readBounded }

// probes are the commands that size an op's reply, and estimate turns
// their replies into the reply's size (pluginhost.ReplySize's measure),
// or known false when only reading it would tell.
func (s *Service) probes(o op) []valkey.Completed {
	b := s.client.B()
	k := o.keys[0]
	usage := func(exact bool) valkey.Completed {
		if exact {
			return b.Arbitrary("MEMORY", "USAGE").Keys(k).Args("SAMPLES", "0").Build()
		}
		return b.Arbitrary("MEMORY", "USAGE").Keys(k).Build()
	}
	switch o.read {
	case readValues:
		switch o.name {
		case "GET":
			return []valkey.Completed{b.Arbitrary("STRLEN").Keys(k).Build()}
		case "MGET":
			if len(o.keys) > maxValueProbes {
				return nil
			}
			out := make([]valkey.Completed, len(o.keys))
			for i, key := range o.keys {
				out[i] = b.Arbitrary("STRLEN").Keys(key).Build()
			}
			return out
		default: // HGET, HMGET: fields after the key
			if len(o.rest) > maxValueProbes {
				return []valkey.Completed{usage(true)}
			}
			out := make([]valkey.Completed, len(o.rest))
			for i, f := range o.rest {
				out[i] = b.Arbitrary("HSTRLEN").Keys(k).Args(f).Build()
			}
			return out
		}
	case readWhole:
		return []valkey.Completed{usage(true)}
	default: // readRange
		return []valkey.Completed{b.Arbitrary("OBJECT", "ENCODING").Keys(k).Build(), usage(false)}
	}
}

// nodeSize is what ReplySize counts per reply node beside its text.
const nodeSize = 16

func estimate(o op, res []valkey.ValkeyResult) (size int64, known bool) {
	if len(res) == 0 {
		return 0, false // too many to probe: read alone
	}
	intOf := func(r valkey.ValkeyResult) (int64, bool) {
		n, err := r.AsInt64()
		switch {
		case err == nil:
			return n, true
		case valkey.IsValkeyNil(err):
			return 0, true // no such key
		}
		var verr *valkey.ValkeyError
		if asValkeyError(err, &verr) && o.read == readValues {
			// WRONGTYPE and the like: the read answers the same error.
			return 0, true
		}
		return 0, false // MEMORY refused by an ACL, no reply: unknown
	}
	switch o.read {
	case readValues:
		if o.name == "HMGET" || o.name == "MGET" {
			size = nodeSize // the array
		}
		if o.name == "HMGET" && len(o.rest) > maxValueProbes {
			n, ok := intOf(res[0])
			return n + size, ok
		}
		for _, r := range res {
			n, ok := intOf(r)
			if !ok {
				return 0, false
			}
			size += n + nodeSize
		}
		return size, true
	case readWhole:
		n, ok := intOf(res[0])
		return n + nodeSize, ok
	default:
		enc, err := res[0].ToString()
		if valkey.IsValkeyNil(err) {
			return nodeSize, true // no such key: an empty reply
		}
		if err != nil || !compactEncodings[enc] {
			return 0, false
		}
		n, ok := intOf(res[1])
		return n + nodeSize, ok
	}
}

// plainBounded runs plain ops under the reply budget, in runs: a run
// ends before a probed read that follows a write (the probe must see
// the write).
func (b *batch) plainBounded(ctx context.Context, ops []op) {
	for len(ops) > 0 {
		if b.acct.spent {
			b.giveSpent(len(ops))
			return
		}
		n, probed, wrote := 0, false, false
		for ; n < len(ops); n++ {
			if ops[n].sized() {
				if wrote {
					break
				}
				probed = true
			}
			if ops[n].write {
				wrote = true
			}
		}
		run := ops[:n]
		ops = ops[n:]
		if !probed {
			// Replies their arguments bound.
			for _, r := range b.pipeline(ctx, run) {
				b.took(b.out.result(r))
			}
			continue
		}
		// On a cluster each slot has its own connection: contiguous ops
		// of one slot go together (a plugin's batch is one partition's,
		// one slot).
		for len(run) > 0 {
			m := 1
			for m < len(run) && b.slot(run[m]) == b.slot(run[0]) {
				m++
			}
			b.transact(ctx, run[:m])
			run = run[m:]
		}
	}
}

// transact runs ops of one slot on a dedicated connection: probed and
// watched transactions, and the reads only reading tells the size of,
// alone.
func (b *batch) transact(ctx context.Context, ops []op) {
	dc, release := b.s.client.Dedicate()
	defer release()
	for len(ops) > 0 {
		if b.acct.spent {
			b.giveSpent(len(ops))
			return
		}
		n, alone := b.watched(ctx, dc, ops)
		ops = ops[n:]
		if alone {
			if b.acct.spent {
				b.giveSpent(1)
			} else {
				// Measured after it is read: the batch holds at most
				// the budget plus this reply.
				b.took(b.out.result(dc.Do(ctx, ops[0].plain)))
			}
			ops = ops[1:]
		}
	}
}

// watched probes ops under WATCH and runs the ones that fit in one
// MULTI/EXEC, up to the first read whose size only reading tells (alone
// true: ops[n] is that read). It gives out the replies of ops[:n].
func (b *batch) watched(ctx context.Context, dc valkey.DedicatedClient, ops []op) (n int, alone bool) {
	probed := false
	for i := range ops {
		ops[i].plain = ops[i].plain.Pin() // sent again after an abort
		probed = probed || ops[i].sized()
	}
	if !probed {
		// What is left after a read alone: replies their arguments
		// bound.
		cmds := make(valkey.Commands, len(ops))
		for i, o := range ops {
			cmds[i] = o.plain
		}
		for _, r := range dc.DoMulti(ctx, cmds...) {
			b.took(b.out.result(r))
		}
		return len(ops), false
	}
	for attempt := 1; ; attempt++ {
		probes, first := b.probesOf(ops)
		res := dc.DoMulti(ctx, probes...)
		if err := res[0].Error(); err != nil {
			// No WATCH, no measure: the commands are not sent.
			for range ops {
				b.took(b.out.result(res[0]))
			}
			return len(ops), false
		}
		p := b.plan(ops, res[1:], first)
		if p.n == 0 {
			dc.Do(ctx, b.s.client.B().Unwatch().Build())
			return 0, p.alone
		}
		exec := b.exec(ctx, dc, ops, p)
		if valkey.IsValkeyNil(exec.Error()) {
			// A watched key changed between the probes and EXEC:
			// nothing ran.
			for _, r := range p.reserved {
				b.acct.add(-r)
			}
			if attempt < watchAttempts {
				continue
			}
			changed := &scannerapi.Reply{Kind: scannerapi.KindError, ErrClass: scannerapi.ErrTransport,
				Err: "the keys read kept changing while the host measured them; try again"}
			for range ops[:p.n] {
				b.took(b.out.reply(changed))
			}
			return p.n, p.alone
		}
		b.giveOut(ops, p, exec)
		return p.n, p.alone
	}
}

// probesOf is the WATCH of every key the sized ops read followed by their
// probes; ops[i]'s probes answer at [first[i]:first[i+1]] of the replies
// after WATCH's.
func (b *batch) probesOf(ops []op) (cmds valkey.Commands, first []int) {
	var watch []string
	cmds = valkey.Commands{{}} // WATCH goes first
	first = make([]int, len(ops)+1)
	for i, o := range ops {
		first[i] = len(cmds) - 1
		if o.sized() {
			watch = append(watch, o.keys...)
			cmds = append(cmds, b.s.probes(o)...)
		}
	}
	first[len(ops)] = len(cmds) - 1
	cmds[0] = b.s.client.B().Watch().Key(watch...).Build()
	return cmds, first
}

// runPlan is which probed ops run in one transaction: ops[:n], less the
// ones too big for what is left of the budget (tooBig, by index, with
// their sizes); reserved holds the sizes reserved from the budget for the
// others until their replies are given out. alone: ops[n] is a read only
// reading measures.
type runPlan struct {
	n        int
	alone    bool
	tooBig   map[int]int64
	reserved []int64
}

// plan decides from the probes' replies which ops run: those that fit what
// is left, up to the first that only reading measures.
func (b *batch) plan(ops []op, probeRes []valkey.ValkeyResult, first []int) runPlan {
	p := runPlan{n: len(ops), tooBig: map[int]int64{}, reserved: make([]int64, len(ops))}
	for i, o := range ops {
		if !o.sized() {
			continue
		}
		size, known := estimate(o, probeRes[first[i]:first[i+1]])
		if !known {
			p.n, p.alone = i, true
			break
		}
		if !b.acct.reserve(size) {
			p.tooBig[i] = size
			continue
		}
		p.reserved[i] = size
	}
	return p
}

// exec sends the plan's ops that fit in MULTI/EXEC and answers EXEC's
// reply.
func (b *batch) exec(ctx context.Context, dc valkey.DedicatedClient, ops []op, p runPlan) valkey.ValkeyResult {
	bd := b.s.client.B()
	txn := valkey.Commands{bd.Multi().Build()}
	for i, o := range ops[:p.n] {
		if _, big := p.tooBig[i]; !big {
			txn = append(txn, o.plain)
		}
	}
	txn = append(txn, bd.Exec().Build())
	res := dc.DoMulti(ctx, txn...)
	return res[len(res)-1]
}

// giveOut gives out the replies of the plan's ops from EXEC's: a refusal
// for the ones too big, the reply for the others.
func (b *batch) giveOut(ops []op, p runPlan, exec valkey.ValkeyResult) {
	msgs, err := exec.ToArray()
	var total int64
	for _, r := range p.reserved {
		total += r
	}
	b.out.grow(total)
	k := 0
	for i := range ops[:p.n] {
		size, big := p.tooBig[i]
		var msg *valkey.ValkeyMessage
		if !big {
			if err == nil && k < len(msgs) {
				msg = &msgs[k]
			}
			k++
		}
		switch {
		case b.acct.spent:
			b.acct.add(-p.reserved[i])
			b.giveSpent(1)
		case big:
			b.s.rec.CallbackRefused(b.scanner, ReasonBudgetReply)
			b.give(refuse(ReasonBudgetReply, "not read: its reply would take %d bytes and the scanner's replies have %d of their %d left",
				size, max(0, b.acct.left()), b.budget).refused)
		case msg == nil:
			// EXECABORT (a command the server refused to queue), or no
			// reply: the same for every command of the transaction.
			b.settled(p.reserved[i], b.out.result(exec))
		default:
			b.settled(p.reserved[i], b.out.message(msg))
		}
	}
}

// asValkeyError is errors.As for a server's error reply.
func asValkeyError(err error, target **valkey.ValkeyError) bool {
	return errors.As(err, target)
}
