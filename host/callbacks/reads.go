package callbacks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

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
// at most the budget plus one such reply, whose count bounds how many
// elements it has; a scanner reading a page of a large index pays a round
// trip for it.
//
// Repetition. The server answers a key or field as often as a command
// names it: an MGET of one 1 MB key 600 times is a 600 MB reply, and the
// host read it whole (it passed 3 GB RSS against a 64 MiB budget),
// because an MGET of more than maxValueProbes keys was read alone and an
// HMGET of as many fields was probed as one whole hash. So each distinct
// key or field is probed once and counted as often as it is named; an
// MGET of more distinct keys than the host probes is refused, and an
// HMGET of more distinct fields is bounded by the whole hash times the
// most any field repeats. A negative count of SRANDMEMBER repeats members
// (SRANDMEMBER key -600 on a one-member set answers that member 600
// times): it is bounded by |count| times the whole set, which bounds its
// largest member. A range without a count (ZRANGE key 0 -1, the BYSCORE
// forms without LIMIT, LRANGE over the whole list) reads as much as the
// whole collection: it is bounded by the collection exactly measured
// (SAMPLES 0, which costs what the read costs) plus the reply nodes of
// its elements (elemSlack), whatever its encoding; a stream's range
// without COUNT, which no measure of the stream bounds (its entries share
// their field names in memory, not in a reply), is refused. A read whose
// bound a probe could not give (MEMORY refused by an ACL) is refused
// too, except a counted range, which is read alone as above.

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

// maxValueProbes bounds the probes of one HMGET or MGET, counted in
// distinct fields or keys; an MGET naming more distinct keys is refused
// (check), an HMGET naming more distinct fields is probed as a whole hash.
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

// nodeSize is what ReplySize counts per reply node beside its text.
const nodeSize = 16

// elemSlack is what one element of a collection may add to a reply
// beyond the bytes MEMORY USAGE counts for it: two reply nodes (a member
// and its score, a field and its value) and the text of numbers a
// collection stores in a few bytes (an integer prints in up to 20, a
// score in up to 24).
const elemSlack = 2*nodeSize + 20 + 24

// cardOf is the command that counts a range's collection (the elements
// elemSlack is counted for), by the range command.
var cardOf = map[string]string{
	"ZRANGE": "ZCARD", "ZRANGEBYSCORE": "ZCARD", "ZREVRANGE": "ZCARD", "ZREVRANGEBYSCORE": "ZCARD", "ZSCAN": "ZCARD",
	"LRANGE": "LLEN", "SSCAN": "SCARD", "SRANDMEMBER": "SCARD", "HSCAN": "HLEN",
	"XRANGE": "XLEN", "XREVRANGE": "XLEN",
}

// distinct lists the distinct strings of xs in order of first
// appearance, and the most times any of them appears.
func distinct(xs []string) (uniq []string, most int64) {
	seen := make(map[string]int64, len(xs))
	for _, x := range xs {
		if seen[x] == 0 {
			uniq = append(uniq, x)
		}
		seen[x]++
		most = max(most, seen[x])
	}
	return uniq, most
}

// valueTexts are the keys (MGET, GET) or fields (HMGET, HGET) whose
// values a readValues op reads, once per time it names them.
func (o op) valueTexts() []string {
	if o.name == "MGET" || o.name == "GET" {
		return o.keys
	}
	return o.rest
}

// rangeShape is what a range read's arguments say about its reply.
type rangeShape struct {
	// counted: the arguments bound how many elements it reads (LIMIT,
	// COUNT, an index range within one end of the collection,
	// SRANDMEMBER's count); else it may read the whole collection.
	counted bool
	// repeats > 0: it may answer one element up to repeats times each
	// (SRANDMEMBER with a negative count): |count|.
	repeats int64
}

// shapeOf reads a range's arguments (o.rest: those after the key). An
// argument that does not parse counts as no count: the server refuses the
// command, after a probe or two.
func shapeOf(o op) rangeShape {
	word := func(w string) int {
		for i, a := range o.rest {
			if strings.EqualFold(a, w) {
				return i
			}
		}
		return -1
	}
	// count is the number after the word at i+off, when it is >= 0.
	count := func(i, off int) bool {
		if i < 0 || i+off >= len(o.rest) {
			return false
		}
		n, err := strconv.ParseInt(o.rest[i+off], 10, 64)
		return err == nil && n >= 0
	}
	// indices: start and stop of the same sign count from the same end.
	indices := func() bool {
		if len(o.rest) < 2 {
			return false
		}
		a, err1 := strconv.ParseInt(o.rest[0], 10, 64)
		b, err2 := strconv.ParseInt(o.rest[1], 10, 64)
		return err1 == nil && err2 == nil && (a < 0) == (b < 0)
	}
	switch o.name {
	case "SRANDMEMBER":
		if len(o.rest) == 0 {
			return rangeShape{counted: true} // one member
		}
		n, err := strconv.ParseInt(o.rest[0], 10, 64)
		switch {
		case err != nil:
			return rangeShape{}
		case n < 0:
			if n == math.MinInt64 {
				n++ // |count| fits; the server refuses it anyway
			}
			return rangeShape{counted: true, repeats: -n}
		default:
			return rangeShape{counted: true} // at most n distinct members
		}
	case "ZRANGE":
		if word("BYSCORE") >= 0 || word("BYLEX") >= 0 {
			return rangeShape{counted: count(word("LIMIT"), 2)}
		}
		return rangeShape{counted: word("LIMIT") < 0 && indices() || count(word("LIMIT"), 2)}
	case "ZREVRANGE", "LRANGE":
		return rangeShape{counted: indices()}
	case "ZRANGEBYSCORE", "ZREVRANGEBYSCORE":
		return rangeShape{counted: count(word("LIMIT"), 2)}
	case "XRANGE", "XREVRANGE":
		return rangeShape{counted: count(word("COUNT"), 1)}
	default:
		// The SCANs: COUNT (default 10) is a hint the server keeps to
		// within a small factor, or it answers a compact collection
		// whole, which the probe measures.
		return rangeShape{counted: true}
	}
}

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
		uniq, _ := distinct(o.valueTexts())
		if o.name == "MGET" || o.name == "GET" {
			out := make([]valkey.Completed, len(uniq)) // check refused more than maxValueProbes
			for i, key := range uniq {
				out[i] = b.Arbitrary("STRLEN").Keys(key).Build()
			}
			return out
		}
		if len(uniq) > maxValueProbes {
			return []valkey.Completed{usage(true)}
		}
		out := make([]valkey.Completed, len(uniq))
		for i, f := range uniq {
			out[i] = b.Arbitrary("HSTRLEN").Keys(k).Args(f).Build()
		}
		return out
	case readWhole:
		return []valkey.Completed{usage(true)}
	default: // readRange
		switch sh := shapeOf(o); {
		case sh.repeats > 0:
			return []valkey.Completed{usage(true)}
		case !sh.counted:
			return []valkey.Completed{usage(true), b.Arbitrary(cardOf[o.name]).Keys(k).Build()}
		default:
			return []valkey.Completed{b.Arbitrary("OBJECT", "ENCODING").Keys(k).Build(), usage(false)}
		}
	}
}

func estimate(o op, res []valkey.ValkeyResult) (size int64, known bool) {
	intOf := func(r valkey.ValkeyResult) (int64, bool) {
		n, err := r.AsInt64()
		switch {
		case err == nil:
			return n, true
		case valkey.IsValkeyNil(err):
			return 0, true // no such key
		}
		var verr *valkey.ValkeyError
		if asValkeyError(err, &verr) && (o.read == readValues || strings.HasPrefix(verr.Error(), "WRONGTYPE")) {
			// WRONGTYPE and the like: the read answers the same error.
			return 0, true
		}
		return 0, false // MEMORY refused by an ACL, no reply: unknown
	}
	switch o.read {
	case readValues:
		texts := o.valueTexts()
		if o.name == "HMGET" || o.name == "MGET" {
			size = nodeSize // the array
		}
		uniq, most := distinct(texts)
		if o.name == "HMGET" && len(uniq) > maxValueProbes {
			// An HMGET of more distinct fields than the host probes:
			// the whole hash bounds the fields named once, and a field
			// named most times bounds each time.
			n, ok := intOf(res[0])
			return size + int64(len(texts))*nodeSize + most*(n+int64(len(uniq))*20), ok
		}
		sizes := make(map[string]int64, len(uniq))
		for i, r := range res {
			n, ok := intOf(r)
			if !ok {
				return 0, false
			}
			sizes[uniq[i]] = n
		}
		for _, t := range texts {
			size += sizes[t] + nodeSize
		}
		return size, true
	case readWhole:
		n, ok := intOf(res[0])
		return n + nodeSize, ok
	}
	switch sh := shapeOf(o); {
	case sh.repeats > 0:
		n, ok := intOf(res[0])
		return nodeSize + sh.repeats*(n+nodeSize), ok
	case !sh.counted:
		n, ok := intOf(res[0])
		c, cok := intOf(res[1])
		return nodeSize + n + c*elemSlack, ok && cok
	}
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

// readsAlone reports whether an op whose reply the probes could not
// bound may be read alone and measured after: only a counted range,
// whose count bounds its elements (and which a large collection's
// probe cannot bound otherwise). Every other read is refused unread.
func readsAlone(o op) bool {
	if o.read != readRange {
		return false
	}
	sh := shapeOf(o)
	return sh.counted && sh.repeats == 0
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
			uniq, _ := distinct(o.keys) // an MGET may name one key 600 times
			watch = append(watch, uniq...)
			cmds = append(cmds, b.s.probes(o)...)
		}
	}
	first[len(ops)] = len(cmds) - 1
	cmds[0] = b.s.client.B().Watch().Key(watch...).Build()
	return cmds, first
}

// unboundedSize marks in runPlan.tooBig a read whose probes gave no
// bound: it is refused unread.
const unboundedSize = -1

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
		if !known && readsAlone(o) {
			p.n, p.alone = i, true
			break
		}
		if !known {
			p.tooBig[i] = unboundedSize
			continue
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
		case big && size == unboundedSize:
			b.s.rec.CallbackRefused(b.scanner, ReasonUnbounded)
			b.give(refuse(ReasonUnbounded, "not read: the host could not measure its reply before reading it (MEMORY USAGE or a size probe failed)").refused)
		case big:
			b.s.rec.CallbackRefused(b.scanner, ReasonBudgetReply)
			b.give(refuse(ReasonBudgetReply, "not read: its reply would take %d bytes%s and the scanner's replies have %d of their %d left",
				size, repeated(ops[i]), max(0, b.acct.left()), b.budget).refused)
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

// repeated says, in a refusal, that a read's bound counts what it
// repeats.
func repeated(o op) string {
	if o.read == readRange {
		if sh := shapeOf(o); sh.repeats > 0 {
			return fmt.Sprintf(" (a count of -%d repeats members: %d times the whole collection)", sh.repeats, sh.repeats)
		}
		return ""
	}
	texts := o.valueTexts()
	if uniq, most := distinct(texts); len(uniq) < len(texts) {
		what := "fields"
		if o.name == "MGET" {
			what = "keys"
		}
		return fmt.Sprintf(" (%d %s, %d distinct, one named %d times: each time counted)", len(texts), what, len(uniq), most)
	}
	return ""
}
