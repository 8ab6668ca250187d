package pluginhost

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// remoteScanner is a Scanner served by a plugin process.
type remoteScanner struct {
	p    *Plugin
	info scannerapi.Info
}

func (s *remoteScanner) Info() scannerapi.Info { return s.info }

func (s *remoteScanner) Configure(parent context.Context, options map[string]string) error {
	ctx, cancel := s.p.callContext(parent)
	defer cancel()
	if _, err := s.p.rpc.Configure(ctx, &pb.ConfigureRequest{Scanner: s.info.Name, Options: options}); err != nil {
		return s.p.rpcError(parent, s.info.Name, "Configure", err)
	}
	return nil
}

func (s *remoteScanner) host(h scannerapi.Host) (scannerapi.Host, error) {
	if h != nil {
		return h, nil
	}
	if s.p.callbacks == nil {
		return nil, fmt.Errorf("scanner %s: no Host given and LaunchConfig.Callbacks is nil", s.info.Name)
	}
	return BindHost(s.p.callbacks, s.info.Name), nil
}

func (s *remoteScanner) ScanPartition(parent context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	h, err := s.host(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.p.callContext(parent)
	defer cancel()
	id := s.p.calls.add(ctx, s.info.Name, h)
	defer s.p.calls.remove(id)
	preq := &pb.ScanPartitionRequest{Scanner: s.info.Name, CallId: id, Request: scanRequestToPB(req)}
	var resp *pb.ScanPartitionResponse
	if sock := s.p.sock; sock != nil && sock.Scans() {
		resp, err = sock.Scan(ctx, preq)
	} else {
		resp, err = s.p.rpc.ScanPartition(ctx, preq)
	}
	if err != nil {
		return nil, s.p.rpcError(parent, s.info.Name, "ScanPartition", err)
	}
	return scanResultFromPB(resp.GetResult()), nil
}

func (s *remoteScanner) SampleBacklog(parent context.Context, host scannerapi.Host, partitions []keys.Partition) ([]int64, error) {
	h, err := s.host(host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.p.callContext(parent)
	defer cancel()
	id := s.p.calls.add(ctx, s.info.Name, h)
	defer s.p.calls.remove(id)
	req := &pb.SampleBacklogRequest{Scanner: s.info.Name, CallId: id}
	for _, part := range partitions {
		req.Partitions = append(req.Partitions, partitionToPB(part))
	}
	resp, err := s.p.rpc.SampleBacklog(ctx, req)
	if err != nil {
		return nil, s.p.rpcError(parent, s.info.Name, "SampleBacklog", err)
	}
	if !resp.GetPresent() {
		return nil, nil
	}
	if d := resp.GetDepths(); d != nil {
		return d, nil
	}
	return []int64{}, nil
}
