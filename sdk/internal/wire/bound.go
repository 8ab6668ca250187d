package wire

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// What decoding a plugin's message may cost the host beyond its bytes.
//
// A message's bytes are bounded (MaxMsgSize), not what protobuf makes of
// them: each field decodes into an object of its own, and a field can
// take two bytes on the wire. An empty argument of a command is two
// bytes and a 24-byte slice header, an empty command two bytes and a
// message of some 80; a 64 MB batch of them decoded into gigabytes
// before any of the host's bounds looked at it (a scan response of empty
// notes, a backlog of one-byte depths the same). So every message the
// host reads from a plugin (its callback batches on gRPC and on the
// socket, its answers to the host's calls) is walked on the wire first,
// which allocates nothing, and refused past MaxMsgFields fields or
// maxMsgDepth levels of nesting.

// The bounds of one callback batch, in commands and in arguments (all
// its commands together): a scanner batches one partition's work, far
// below them. pluginhost exports them (MaxBatchCommands, MaxBatchArgs)
// and decodes packed batches under them.
const (
	MaxBatchCommands = 10000
	// MaxBatchArgs: 16 MiB of string headers decoded at most.
	MaxBatchArgs = 1 << 20
)

// MaxMsgFields bounds the fields of one message from a plugin, nested
// ones and the elements of packed lists included: a whole batch of
// commands and arguments in the protobuf form of the unary Exec, and a
// little more.
const MaxMsgFields = MaxBatchCommands + MaxBatchArgs + 1<<12

// maxMsgDepth bounds nesting (a reply nests a few levels; protobuf's own
// bound is 10,000).
const maxMsgDepth = 64

// CheckFields walks b, the wire form of a message of type md, and fails
// when it has more than MaxMsgFields fields or nests deeper than
// maxMsgDepth. A malformed b is left for the decoder to refuse.
func CheckFields(b []byte, md protoreflect.MessageDescriptor) error {
	n := 0
	return checkFields(b, md, &n, 0)
}

func checkFields(b []byte, md protoreflect.MessageDescriptor, n *int, depth int) error {
	if depth > maxMsgDepth {
		return fmt.Errorf("%s: nested deeper than %d", md.FullName(), maxMsgDepth)
	}
	fields := md.Fields()
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil // malformed: the decoder says so
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return nil
		}
		*n++
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			switch fd := fields.ByNumber(num); {
			case fd == nil:
			case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
				if err := checkFields(v, fd.Message(), n, depth+1); err != nil {
					return err
				}
			case fd.IsList() && fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind:
				// A packed list: an element per varint (a byte without
				// its high bit ends one), or per fixed-size chunk, at
				// most one a byte either way.
				for _, c := range v {
					if c < 0x80 {
						*n++
					}
				}
			}
		}
		if *n > MaxMsgFields {
			return fmt.Errorf("%s: more than %d fields", md.FullName(), MaxMsgFields)
		}
		b = b[l:]
	}
	return nil
}

// boundedCodec is gRPC's protobuf codec with CheckFields before each
// decode: the host's codec for what it receives from a plugin (the
// callback server's requests, the answers to its calls).
type boundedCodec struct{ encoding.CodecV2 }

func (c boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(messageBuffers)
	defer buf.Free()
	if err := CheckFields(buf.ReadOnlyData(), m.ProtoReflect().Descriptor()); err != nil {
		return fmt.Errorf("refused before decoding: %w", err)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

var hostCodec = boundedCodec{encoding.GetCodecV2(grpcproto.Name)}

// MaxCallbackStreams bounds the streams of a plugin's callback server at
// once: a plugin uses one (the batch stream), or, built before it, one
// unary Exec per batch in flight, which the host's own bound on a
// scanner's batches in flight (callbacks.Budget.MaxInFlight, 64 by
// default) refuses past the same number. A stream past it is refused
// by HTTP/2 (gRPC's clients wait for one to end), so a plugin cannot
// make the host decode more messages at once than this.
const MaxCallbackStreams = MaxStreamBatches

// NewCallbackServer is the host's callback server for one plugin:
// NewGRPCServer with at most MaxCallbackStreams streams, and requests
// checked before they are decoded (CheckFields).
func NewCallbackServer(opts []grpc.ServerOption) *grpc.Server {
	return NewGRPCServer(append(opts, grpc.MaxConcurrentStreams(MaxCallbackStreams), grpc.ForceServerCodecV2(hostCodec)))
}

// HostDialOptions are DialOptions for the host's connection to a plugin:
// the plugin's answers checked before they are decoded.
func HostDialOptions() []grpc.DialOption {
	return append(DialOptions(), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(hostCodec)))
}
