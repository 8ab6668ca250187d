package scannerapi

import (
	"strings"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi/internal/pb"
)

// This file maps the contract types to their protobuf form and back. The
// mapping is lossless for every value a scanner can produce, except that
// free-text fields the proto declares as strings (error messages, notes,
// codes, option values) are made valid UTF-8, and empty slices come back
// nil; Normalize applies the same rules to results of linked scanners so
// both modes compare equal.

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func infoToPB(in Info) *pb.ScannerInfo {
	out := &pb.ScannerInfo{
		Name:              in.Name,
		Version:           validUTF8(in.Version),
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
			Name: o.Name, Type: string(o.Type), Default: validUTF8(o.Default),
			Description: validUTF8(o.Description),
		})
	}
	return out
}

func infoFromPB(in *pb.ScannerInfo) Info {
	out := Info{
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
		out.Sources = append(out.Sources, CandidateSource{
			Name: s.GetName(), Kind: SourceKind(s.GetKind()), Key: s.GetKey(),
			ScoreOffset: time.Duration(s.GetScoreOffsetNs()), Backlog: BacklogMode(s.GetBacklog()),
		})
	}
	for _, ks := range in.GetKeyScopes() {
		out.KeyScopes = append(out.KeyScopes, KeyScope{Command: ks.GetCommand(), Patterns: ks.GetPatterns()})
	}
	for _, o := range in.GetOptions() {
		out.Options = append(out.Options, OptionSpec{
			Name: o.GetName(), Type: OptionType(o.GetType()), Default: o.GetDefault(),
			Description: o.GetDescription(),
		})
	}
	return out
}

func partitionToPB(p keys.Partition) *pb.Partition {
	return &pb.Partition{Family: uint32(p.Family), Index: uint32(p.Index)}
}

func partitionFromPB(p *pb.Partition) keys.Partition {
	return keys.Partition{Family: keys.Family(p.GetFamily()), Index: uint16(p.GetIndex())}
}

func scanRequestToPB(r *ScanRequest) *pb.ScanRequest {
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
			Class: validUTF8(string(e.Class)), Code: validUTF8(e.Code), Count: e.Count,
		})
	}
	for _, n := range r.Notes {
		out.Notes = append(out.Notes, validUTF8(n))
	}
	return out
}

func scanResultFromPB(r *pb.ScanResult) *ScanResult {
	if r == nil {
		return &ScanResult{}
	}
	out := &ScanResult{
		Processed: r.GetProcessed(), Skipped: r.GetSkipped(), More: r.GetMore(),
		Backlog: r.GetBacklog(), HasBacklog: r.GetHasBacklog(),
		Settled: r.GetSettled(), Lag: time.Duration(r.GetLagNs()), HasLag: r.GetHasLag(),
	}
	for _, e := range r.GetErrors() {
		out.Errors = append(out.Errors, ErrorCount{Class: ErrorClass(e.GetClass()), Code: e.GetCode(), Count: e.GetCount()})
	}
	if ns := r.GetNotes(); len(ns) > 0 {
		out.Notes = append([]string(nil), ns...)
	}
	return out
}

// Normalize returns r in the form it has after crossing the plugin wire:
// a nil result becomes an empty one, empty slices become nil, and free-text
// fields are made valid UTF-8. Linked scanners run through it (see Linked) so
// a scanner reports identical results in both modes.
func Normalize(r *ScanResult) *ScanResult {
	return scanResultFromPB(scanResultToPB(r))
}

func commandsToPB(cmds []Command) []*pb.Command {
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

func commandsFromPB(cmds []*pb.Command) []Command {
	out := make([]Command, len(cmds))
	for i, c := range cmds {
		args := c.GetArgs()
		cmd := make(Command, len(args))
		for j, a := range args {
			cmd[j] = string(a)
		}
		out[i] = cmd
	}
	return out
}

func replyToPB(r Reply) *pb.Reply {
	out := &pb.Reply{
		Kind: uint32(r.Kind), Int: r.Int, Float: r.Float,
		Err: validUTF8(r.Err), ErrClass: string(r.ErrClass),
	}
	if r.Str != "" {
		out.Str = []byte(r.Str)
	}
	if len(r.Array) > 0 {
		out.Array = make([]*pb.Reply, len(r.Array))
		for i, e := range r.Array {
			out.Array[i] = replyToPB(e)
		}
	}
	return out
}

func replyFromPB(r *pb.Reply) Reply {
	out := Reply{
		Kind: ReplyKind(r.GetKind()), Str: string(r.GetStr()), Int: r.GetInt(), Float: r.GetFloat(),
		Err: r.GetErr(), ErrClass: ErrorClass(r.GetErrClass()),
	}
	if arr := r.GetArray(); len(arr) > 0 {
		out.Array = make([]Reply, len(arr))
		for i, e := range arr {
			out.Array[i] = replyFromPB(e)
		}
	}
	return out
}

func repliesToPB(rs []Reply) []*pb.Reply {
	out := make([]*pb.Reply, len(rs))
	for i, r := range rs {
		out[i] = replyToPB(r)
	}
	return out
}

func repliesFromPB(rs []*pb.Reply) []Reply {
	out := make([]Reply, len(rs))
	for i, r := range rs {
		out[i] = replyFromPB(r)
	}
	return out
}
