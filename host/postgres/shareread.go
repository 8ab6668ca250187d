package postgres

import (
	"fmt"
	"strconv"
	"strings"
)

// A host that shares the database with others reads its own partitions
// only, but a candidate function's read of more than a few partitions
// runs one plan over every child of its tables (the generic plan, pruned
// at run time). That plan costs the same whatever the host's share:
// planning it takes 100-230 ms over 256 partitions, starting it at every
// read a few milliseconds for children the host never reads, and an
// analyze of any child (autovacuum's, after a burst of writes) drops it
// on every host at once, each of which plans it again. Three hosts paid
// that three times: in the Postgres hosts benchmark their reads used
// 2.7 times the database's CPU of one host's for the same items.
//
// A share read is one statement for the host's share: for each partition
// of the share, the candidate function's read of that one partition
// (<name>_in, the same SQL function the candidate function runs per
// partition, inlined with the partition as a constant), run only when the
// read asks for it. Each part is planned for its partition's children
// alone, so the plan (generic, kept by the read connection) covers the
// share's children only: it costs a share's worth to plan and start, and
// only an analyze of one of those children drops it. The statement's text
// names the share, so a new share is a new statement, planned at its
// first read.

// shareable reports whether fn's read of parts is, for each partition
// in parts, its <name>_in(partition, per_partition, filter...) (and its
// companion's, <next>_in(partition, as_of_ms, filter...)): every
// candidate function's but the worker registry's, whose partitions are
// not the host's.
func shareable(fn string) bool { return CandidateFunctions[fn] && fn != "workers_expired" }

// fewPartitions is ffscan.few_partitions(): a read of that many
// partitions or fewer plans each partition's query at the read (a plan of
// one child each), which a share read would not beat.
const fewPartitions = 16

// shareKey is a set of partitions (a family has at most 1024).
type shareKey [16]uint64

func keyOf(parts []uint16) (shareKey, bool) {
	var k shareKey
	for _, p := range parts {
		if int(p) >= len(k)*64 {
			return k, false
		}
		k[p/64] |= 1 << (p % 64)
	}
	return k, true
}

// covers reports whether every partition of parts is in k.
func (k *shareKey) covers(parts []uint16) bool {
	for _, p := range parts {
		if int(p) >= len(k)*64 || k[p/64]&(1<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

// shareQuery is fn's read of parts as a share read of share (with next,
// with its next-due companion's as of the SQL expression asOf, the rows
// as dueAndNextQuery's), and false when that read does not apply: fn has
// no per-partition form, the share is no proper part of the family's
// count partitions, the read asks few partitions or one outside the
// share. Its rows are the candidate function's for parts, in the share's
// order of partitions.
func shareQuery(fn string, parts, share []uint16, count uint16, perPartition int, next bool, asOf string, f []any) (string, []any, bool) {
	if !shareable(fn) || len(parts) <= fewPartitions || len(share) >= int(count) {
		return "", nil, false
	}
	key, ok := keyOf(share)
	if !ok || !key.covers(parts) {
		return "", nil, false
	}
	return buildShareQuery(fn, share, next, asOf), append([]any{partitionKeys(parts), perPartition}, f...), true
}

// buildShareQuery writes the share read: $1 the partitions asked, $2 the
// rows per partition, $3-$5 the filter. A partition's part runs only when
// $1 holds it (a one-time filter: the others are started, not read).
func buildShareQuery(fn string, share []uint16, next bool, asOf string) string {
	var b strings.Builder
	for i, p := range share {
		k := strconv.Itoa(int(p)) + "::smallint"
		gate := " WHERE " + k + " = ANY($1::smallint[])"
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		due := ""
		if next {
			due = ", true"
		}
		fmt.Fprintf(&b, "SELECT partition_key, member, score%s FROM ffscan.%s_in(%s, $2::integer, $3::text, $4::text, $5::text)%s", due, fn, k, gate)
		if next {
			fmt.Fprintf(&b, " UNION ALL SELECT partition_key, member, due_at_ms, false FROM ffscan.%s_in(%s, %s, $3::text, $4::text, $5::text)%s",
				NextDueFunctions[fn], k, asOf, gate)
		}
	}
	return b.String()
}
