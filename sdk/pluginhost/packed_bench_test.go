package pluginhost

import (
	"testing"

	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/testscanners"
	"github.com/ffscan/ffscan/sdk/internal/wire"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// BenchmarkPackedCodec measures what the packed encoding costs the host
// per command, for the drain's batch of 390 FCALLs: it unpacks the
// commands and packs the replies in a recycled buffer, as on the socket.
// (The plugin's side is scannerapi's BenchmarkPackedCodec.) Linked in, a
// scanner pays none of it.
func BenchmarkPackedCodec(b *testing.B) {
	const n = 390
	cmds, replies := testscanners.DrainBatch(n)
	packedCmds := codec.AppendCommands(nil, cmds)
	b.Run("host", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := codec.UnpackCommands[scannerapi.Command](packedCmds, batchLimits); err != nil {
				b.Fatal(err)
			}
			buf := wire.GetBatchBuffer(0)
			w := newReplyWriter(*buf, len(replies))
			for i := range replies {
				w.Reply(&replies[i])
			}
			wire.PutBatchBuffer(buf, w.buf)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/command")
	})
}
