package pluginhost

import (
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// This file maps the contract types to their protobuf form and back, in
// the directions a host needs: what it sends a plugin (requests, replies)
// and what it receives (a scanner's Info, its results, its commands).
// The plugin's side maps the other directions (sdk/scannerapi); the
// batch encodings both sides share are in sdk/internal/codec.

func infoFromPB(in *pb.ScannerInfo) scannerapi.Info {
	out := scannerapi.Info{
		Name:            in.GetName(),
		Version:         in.GetVersion(),
		APIVersion:      int(in.GetApiVersion()),
		Family:          keys.Family(in.GetFamily()),
		DefaultInterval: time.Duration(in.GetDefaultIntervalNs()),
		DefaultBatch:    int(in.GetDefaultBatch()),
		Commands:        in.GetCommands(),
		Functions:       in.GetFunctions(),
	}
	for _, s := range in.GetSources() {
		out.Sources = append(out.Sources, scannerapi.CandidateSource{
			Name: s.GetName(), Kind: scannerapi.SourceKind(s.GetKind()), Key: s.GetKey(),
			ScoreOffset: time.Duration(s.GetScoreOffsetNs()), Backlog: scannerapi.BacklogMode(s.GetBacklog()),
		})
	}
	for _, ks := range in.GetKeyScopes() {
		out.KeyScopes = append(out.KeyScopes, scannerapi.KeyScope{Command: ks.GetCommand(), Patterns: ks.GetPatterns()})
	}
	for _, fs := range in.GetFunctionScopes() {
		out.FunctionScopes = append(out.FunctionScopes, scannerapi.FunctionScope{Function: fs.GetFunction(), Patterns: fs.GetPatterns()})
	}
	for _, o := range in.GetOptions() {
		out.Options = append(out.Options, scannerapi.OptionSpec{
			Name: o.GetName(), Type: scannerapi.OptionType(o.GetType()), Default: o.GetDefault(),
			Description: o.GetDescription(),
		})
	}
	return out
}

func partitionToPB(p keys.Partition) *pb.Partition {
	return &pb.Partition{Family: uint32(p.Family), Index: uint32(p.Index)}
}

func scanRequestToPB(r *scannerapi.ScanRequest) *pb.ScanRequest {
	out := &pb.ScanRequest{
		Partition:  partitionToPB(r.Partition),
		NowMs:      r.NowMs,
		Cycle:      r.Cycle,
		Batch:      int32(r.Batch),
		DryRun:     r.DryRun,
		StoreEpoch: r.StoreEpoch,
	}
	if len(r.Lanes) > 0 {
		out.Lanes = make([][]byte, len(r.Lanes))
		for i, l := range r.Lanes {
			out.Lanes[i] = []byte(l)
		}
	}
	if len(r.Candidates) > 0 {
		out.Candidates = make([]*pb.Candidate, len(r.Candidates))
		for i, c := range r.Candidates {
			out.Candidates[i] = &pb.Candidate{
				Source: c.Source, Key: []byte(c.Key), Lane: []byte(c.Lane),
				Member: []byte(c.Member), Score: c.Score,
			}
		}
	}
	return out
}

func scanResultFromPB(r *pb.ScanResult) *scannerapi.ScanResult {
	if r == nil {
		return &scannerapi.ScanResult{}
	}
	out := &scannerapi.ScanResult{
		Processed: r.GetProcessed(), Skipped: r.GetSkipped(), More: r.GetMore(),
		Backlog: r.GetBacklog(), HasBacklog: r.GetHasBacklog(),
		Settled: r.GetSettled(), Lag: time.Duration(r.GetLagNs()), HasLag: r.GetHasLag(),
	}
	for _, e := range r.GetErrors() {
		out.Errors = append(out.Errors, scannerapi.ErrorCount{Class: scannerapi.ErrorClass(e.GetClass()), Code: e.GetCode(), Count: e.GetCount()})
	}
	if ns := r.GetNotes(); len(ns) > 0 {
		out.Notes = append([]string(nil), ns...)
	}
	return out
}

// replyNode reads a reply as a node and its elements (the host's side of
// codec.Node).
func replyNode(r *scannerapi.Reply) (codec.Node, []scannerapi.Reply) {
	return codec.Node{Kind: byte(r.Kind), Str: r.Str, Int: r.Int, Float: r.Float, Err: r.Err, Class: string(r.ErrClass)}, r.Array
}

// repliesToPB converts a unary Exec's replies.
func repliesToPB(rs []scannerapi.Reply) []*pb.Reply { return codec.RepliesToPB(rs, replyNode) }
