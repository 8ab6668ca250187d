package scannerapi

import (
	"fmt"
	"testing"
)

// drainShapedBatch is a callback batch as lease_expiry sends it in the
// drain: n FCALLs of ff_mark_lease_expired_if_due (four keys and the
// execution id), and the replies the function gives a marked lease.
func drainShapedBatch(n int) ([]Command, []Reply) {
	cmds := make([]Command, n)
	replies := make([]Reply, n)
	for i := range cmds {
		eid := fmt.Sprintf("{fp:17}:0b7c4e3a-9d1f-4c2a-8e5b-%012x", i)
		core := "ff:exec:{fp:17}:" + eid + ":core"
		cmds[i] = FCall("ff_mark_lease_expired_if_due",
			[]string{core, "ff:exec:{fp:17}:" + eid + ":lease:current", "ff:idx:{fp:17}:lease_expiry", "ff:exec:{fp:17}:" + eid + ":lease:history"},
			eid)
		replies[i] = Reply{Kind: KindArray, Array: []Reply{{Kind: KindInt, Int: 1}, {Kind: KindString, Str: "OK"}, {Kind: KindString, Str: "marked"}}}
	}
	return cmds, replies
}

// BenchmarkPackedCodec measures what the packed encoding costs per
// command on each side of a plugin's callback channel, for the drain's
// batch of 390 FCALLs: the plugin packs the commands and unpacks the
// replies, the host unpacks the commands and packs the replies, in
// recycled buffers as on the socket. Linked in, a scanner pays none of it.
func BenchmarkPackedCodec(b *testing.B) {
	const n = 390
	cmds, replies := drainShapedBatch(n)
	packedCmds := appendPackedCommands(nil, cmds)
	packedReplies := packReplies(replies)
	b.Run("plugin", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf := getBatchBuffer(packedCommandsSize(cmds))
			putBatchBuffer(buf, appendPackedCommands(*buf, cmds))
			if _, err := unpackReplies(packedReplies); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/command")
	})
	b.Run("host", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := unpackCommands(packedCmds); err != nil {
				b.Fatal(err)
			}
			buf := getBatchBuffer(0)
			putBatchBuffer(buf, appendPackedReplies(*buf, replies))
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/command")
	})
}
