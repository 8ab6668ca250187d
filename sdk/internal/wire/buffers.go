package wire

import "sync"

// Packed batches are built in recycled buffers where the channel copies a
// message before its Send returns: the inherited socket does (FrameConn
// marshals into its own buffer), gRPC does not promise it (a stats handler
// may read a message after SendMsg returned), so batches on gRPC always
// get a new buffer. In the drain a batch is tens of kilobytes, a new one
// for every callback in both processes: that garbage set the pace of both
// garbage collectors.

// MaxPooledBuffer is the largest buffer kept for reuse: a rare huge batch
// does not stay in memory.
const MaxPooledBuffer = 1 << 20

var batchBuffers = sync.Pool{New: func() any { return new([]byte) }}

// GetBatchBuffer returns an empty buffer with room for size bytes.
func GetBatchBuffer(size int) *[]byte {
	b := batchBuffers.Get().(*[]byte)
	if cap(*b) < size {
		*b = make([]byte, 0, size)
	}
	*b = (*b)[:0]
	return b
}

// PutBatchBuffer recycles buf, which now holds used (nil: buf was not
// used). Nothing may refer to its bytes any more.
func PutBatchBuffer(buf *[]byte, used []byte) {
	if used == nil {
		used = *buf
	}
	if cap(used) > MaxPooledBuffer {
		return
	}
	*buf = used[:0]
	batchBuffers.Put(buf)
}
