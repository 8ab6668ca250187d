package codec

import "github.com/ffscan/ffscan/sdk/internal/pb"

// The protobuf form of a batch: one message per command and per reply
// node, as the unary Exec carries it (plugins built before the batch
// stream send it; the host still serves it). Arguments and reply strings
// travel as bytes, binary-safe; an error text is a protobuf string and is
// made valid UTF-8.

// CommandsToPB converts commands to their protobuf messages.
func CommandsToPB[C ~[]string](cmds []C) []*pb.Command {
	out := make([]*pb.Command, len(cmds))
	for i, c := range cmds {
		args := make([][]byte, len(c))
		for j, a := range c {
			args[j] = []byte(a)
		}
		out[i] = &pb.Command{Args: args}
	}
	return out
}

// CommandsFromPB converts protobuf commands back.
func CommandsFromPB[C ~[]string](cmds []*pb.Command) []C {
	out := make([]C, len(cmds))
	for i, c := range cmds {
		args := c.GetArgs()
		cmd := make(C, len(args))
		for j, a := range args {
			cmd[j] = string(a)
		}
		out[i] = cmd
	}
	return out
}

// RepliesToPB converts replies to their protobuf messages, reading each
// node with node (see Node).
func RepliesToPB[R any](rs []R, node func(*R) (Node, []R)) []*pb.Reply {
	out := make([]*pb.Reply, len(rs))
	for i := range rs {
		out[i] = replyToPB(&rs[i], node)
	}
	return out
}

func replyToPB[R any](r *R, node func(*R) (Node, []R)) *pb.Reply {
	n, elems := node(r)
	out := &pb.Reply{
		Kind: uint32(n.Kind), Int: n.Int, Float: n.Float,
		Err: ValidUTF8(n.Err), ErrClass: n.Class,
	}
	if n.Str != "" {
		out.Str = []byte(n.Str)
	}
	if len(elems) > 0 {
		out.Array = make([]*pb.Reply, len(elems))
		for i := range elems {
			out.Array[i] = replyToPB(&elems[i], node)
		}
	}
	return out
}

// RepliesFromPB converts protobuf replies back, filling each R, a zero
// value, with set (see Node).
func RepliesFromPB[R any](rs []*pb.Reply, set func(*R, Node, []R)) []R {
	out := make([]R, len(rs))
	for i, r := range rs {
		replyFromPB(&out[i], r, set)
	}
	return out
}

func replyFromPB[R any](out *R, r *pb.Reply, set func(*R, Node, []R)) {
	n := Node{
		Kind: byte(r.GetKind()), Str: string(r.GetStr()), Int: r.GetInt(), Float: r.GetFloat(),
		Err: r.GetErr(), Class: r.GetErrClass(),
	}
	var elems []R
	if arr := r.GetArray(); len(arr) > 0 {
		elems = make([]R, len(arr))
		for i, e := range arr {
			replyFromPB(&elems[i], e, set)
		}
	}
	set(out, n, elems)
}
