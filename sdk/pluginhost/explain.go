package pluginhost

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/scancall"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Explain asks a scanner the host drives (launched or linked) what its
// next scan would do with one execution (scannerapi.Explainer). A scanner
// that does not explain, or a plugin built before the Explain RPC, answers
// scannerapi.ErrNotExplained. The scanner's commands go to host (nil: the
// plugin's or the linked scanner's Callbacks) through ReadOnly, so an
// explanation can never write.
func Explain(ctx context.Context, s HostScanner, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	switch s := s.(type) {
	case *remoteScanner:
		return s.explain(ctx, host, req)
	case *linked:
		return s.explain(ctx, host, req)
	}
	if ex, ok := s.(scannerapi.Explainer); ok {
		if host == nil {
			return nil, fmt.Errorf("scanner %s: Explain needs a Host", s.Info().Name)
		}
		return ex.Explain(ctx, ReadOnly(host), req)
	}
	return nil, scannerapi.ErrNotExplained
}

// readOnlyCommands are the commands an explanation may run through its
// Host: reads only. A host serves an Explain call's batches through
// ReadOnly, which refuses everything else (writes and FCALLs included), so
// a bug in a scanner's Explain cannot change the store. It is the
// security allow-list of Explain: unexported, so nothing linked into the
// process can widen it.
var readOnlyCommands = map[string]bool{
	"GET": true, "MGET": true, "EXISTS": true, "TYPE": true, "TIME": true,
	"HGET": true, "HMGET": true, "HGETALL": true, "HEXISTS": true, "HLEN": true,
	"ZSCORE": true, "ZRANGE": true, "ZCOUNT": true, "ZCARD": true, "ZRANK": true,
	"SISMEMBER": true, "SMEMBERS": true, "SCARD": true, "SRANDMEMBER": true, "SSCAN": true,
	"LRANGE": true, "LLEN": true, "XLEN": true,
}

// ReadOnly wraps a Host so that only reads run (GET, MGET, EXISTS, TYPE,
// TIME, HGET, HMGET, HGETALL, HEXISTS, HLEN, ZSCORE, ZRANGE, ZCOUNT,
// ZCARD, ZRANK, SISMEMBER, SMEMBERS, SCARD, SRANDMEMBER, SSCAN, LRANGE,
// LLEN, XLEN): every other command (writes, FCALL, PGCALL) gets an error
// reply of class refused, and nothing is sent for it.
func ReadOnly(h scannerapi.Host) scannerapi.Host {
	return scannerapi.HostFunc(func(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		out := make([]scannerapi.Reply, len(cmds))
		var pass []scannerapi.Command
		var at []int
		for i, c := range cmds {
			if len(c) == 0 || !readOnlyCommands[strings.ToUpper(c[0])] {
				name := ""
				if len(c) > 0 {
					name = c[0]
				}
				out[i] = scannerapi.Reply{Kind: scannerapi.KindError, Err: "explain may only read: " + name + " refused", ErrClass: scannerapi.ErrRefused}
				continue
			}
			pass = append(pass, c)
			at = append(at, i)
		}
		if len(pass) > 0 {
			rs, err := h.Exec(ctx, pass)
			if err != nil {
				return nil, err
			}
			if len(rs) != len(pass) {
				return nil, fmt.Errorf("pluginhost: host answered %d replies to %d commands", len(rs), len(pass))
			}
			for j, i := range at {
				out[i] = rs[j]
			}
		}
		return out, nil
	})
}

func (s *remoteScanner) explain(parent context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	h, err := s.host(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.p.callContext(parent)
	defer cancel()
	id := s.p.calls.add(ctx, s.info.Name, ReadOnly(h))
	defer s.p.calls.remove(id)
	sreq := req.Scan
	sreq.DryRun = true
	resp, err := s.p.rpc.Explain(ctx, &pb.ExplainRequest{Scanner: s.info.Name, CallId: id, Request: scanRequestToPB(&sreq), ExecutionId: req.ExecutionID})
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
			return nil, scannerapi.ErrNotExplained
		}
		return nil, s.p.rpcError(parent, s.info.Name, "Explain", err)
	}
	if !resp.GetExplained() {
		return nil, scannerapi.ErrNotExplained
	}
	out := &scannerapi.Explanation{
		Verdict: scannerapi.Verdict(resp.GetVerdict()), Reason: resp.GetReason(), Detail: resp.GetDetail(),
		DueAtMs: resp.GetDueAtMs(), BackoffUntilCycle: resp.GetBackoffUntilCycle(),
	}
	if in := resp.GetInconsistent(); len(in) > 0 {
		out.Inconsistent = append([]string(nil), in...)
	}
	return out, nil
}

func (l *linked) explain(ctx context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (out *scannerapi.Explanation, err error) {
	defer scancall.Recover(l.name, "Explain", &err)
	ex, ok := l.s.(scannerapi.Explainer)
	if !ok {
		return nil, scannerapi.ErrNotExplained
	}
	h, err := l.host(host)
	if err != nil {
		return nil, err
	}
	r := *req
	r.Scan.DryRun = true
	if r.Scan.Scanner == "" {
		r.Scan.Scanner = l.name
	}
	out, err = ex.Explain(l.ctx(ctx), ReadOnly(h), &r)
	if err == nil && out == nil {
		out = &scannerapi.Explanation{Verdict: scannerapi.VerdictNothing}
	}
	return out, err
}
