package scannerapi

import (
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
)

// This file maps the contract types to their protobuf form and back, in
// the directions a plugin needs: what it sends (its Info, its results, its
// commands) and what it receives (requests, replies). The host's side
// maps the other directions (sdk/pluginhost); the batch encodings both
// sides share are in sdk/internal/codec. The mapping is lossless for
// every value a scanner can produce, except that free-text fields the
// proto declares as strings (error messages, notes, codes, option values)
// are made valid UTF-8, and empty slices come back nil.

func infoToPB(in Info) *pb.ScannerInfo {
	out := &pb.ScannerInfo{
		Name:              in.Name,
		Version:           codec.ValidUTF8(in.Version),
		ApiVersion:        int32(in.APIVersion),
		Family:            uint32(in.Family),
		DefaultIntervalNs: int64(in.DefaultInterval),
		DefaultBatch:      int32(in.DefaultBatch),
		Commands:          in.Commands,
		Functions:         in.Functions,
	}
	for _, s := range in.Sources {
		out.Sources = append(out.Sources, &pb.CandidateSource{
			Name: s.Name, Kind: string(s.Kind), Key: s.Key,
			ScoreOffsetNs: int64(s.ScoreOffset), Backlog: string(s.Backlog),
		})
	}
	for _, ks := range in.KeyScopes {
		out.KeyScopes = append(out.KeyScopes, &pb.KeyScope{Command: ks.Command, Patterns: ks.Patterns})
	}
	for _, o := range in.Options {
		out.Options = append(out.Options, &pb.OptionSpec{
			Name: o.Name, Type: string(o.Type), Default: codec.ValidUTF8(o.Default),
			Description: codec.ValidUTF8(o.Description),
		})
	}
	return out
}

func partitionFromPB(p *pb.Partition) keys.Partition {
	return keys.Partition{Family: keys.Family(p.GetFamily()), Index: uint16(p.GetIndex())}
}

func scanRequestFromPB(scanner string, r *pb.ScanRequest) *ScanRequest {
	out := &ScanRequest{
		Scanner:    scanner,
		Partition:  partitionFromPB(r.GetPartition()),
		NowMs:      r.GetNowMs(),
		Cycle:      r.GetCycle(),
		Batch:      int(r.GetBatch()),
		DryRun:     r.GetDryRun(),
		StoreEpoch: r.GetStoreEpoch(),
	}
	if ls := r.GetLanes(); len(ls) > 0 {
		out.Lanes = make([]string, len(ls))
		for i, l := range ls {
			out.Lanes[i] = string(l)
		}
	}
	if cs := r.GetCandidates(); len(cs) > 0 {
		out.Candidates = make([]Candidate, len(cs))
		for i, c := range cs {
			out.Candidates[i] = Candidate{
				Source: c.GetSource(), Key: string(c.GetKey()), Lane: string(c.GetLane()),
				Member: string(c.GetMember()), Score: c.GetScore(),
			}
		}
	}
	return out
}

func scanResultToPB(r *ScanResult) *pb.ScanResult {
	if r == nil {
		return nil
	}
	out := &pb.ScanResult{
		Processed: r.Processed, Skipped: r.Skipped, More: r.More,
		Backlog: r.Backlog, HasBacklog: r.HasBacklog,
		Settled: r.Settled, LagNs: int64(r.Lag), HasLag: r.HasLag,
	}
	for _, e := range r.Errors {
		out.Errors = append(out.Errors, &pb.ErrorCount{
			Class: codec.ValidUTF8(string(e.Class)), Code: codec.ValidUTF8(e.Code), Count: e.Count,
		})
	}
	for _, n := range r.Notes {
		out.Notes = append(out.Notes, codec.ValidUTF8(n))
	}
	return out
}

// setReply fills the zero reply r from a decoded node and its elements
// (the plugin's side of codec.Node). It sets only the fields the node
// has: a reply's memory is fresh, and each string or slice stored costs
// a write barrier while the collector runs.
func setReply(r *Reply, n codec.Node, elems []Reply) {
	r.Kind, r.Int, r.Float = ReplyKind(n.Kind), n.Int, n.Float
	if n.Str != "" {
		r.Str = n.Str
	}
	if elems != nil {
		r.Array = elems
	}
	if n.Err != "" {
		r.Err = n.Err
	}
	if n.Class != "" {
		r.ErrClass = ErrorClass(n.Class)
	}
}

// unpackReplies decodes the packed replies of a batch.
func unpackReplies(b []byte) ([]Reply, error) { return codec.UnpackReplies(b, setReply) }

// repliesFromPB converts the replies of a unary Exec.
func repliesFromPB(rs []*pb.Reply) []Reply { return codec.RepliesFromPB(rs, setReply) }

func explanationToPB(e *Explanation) *pb.ExplainResponse {
	if e == nil {
		e = &Explanation{Verdict: VerdictNothing}
	}
	out := &pb.ExplainResponse{
		Explained: true, Verdict: codec.ValidUTF8(string(e.Verdict)), Reason: codec.ValidUTF8(e.Reason),
		Detail: codec.ValidUTF8(e.Detail), DueAtMs: e.DueAtMs, BackoffUntilCycle: e.BackoffUntilCycle,
	}
	for _, s := range e.Inconsistent {
		out.Inconsistent = append(out.Inconsistent, codec.ValidUTF8(s))
	}
	return out
}
