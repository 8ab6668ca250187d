package scannerapi

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/internal/codec"
	"github.com/ffscan/ffscan/sdk/internal/pb"
	"github.com/ffscan/ffscan/sdk/internal/scancall"
	"github.com/ffscan/ffscan/sdk/internal/storeepoch"
	"github.com/ffscan/ffscan/sdk/internal/wire"
)

// parentPollInterval is how often a plugin checks that the process that
// started it is still its parent.
const parentPollInterval = 250 * time.Millisecond

// Serve runs a plugin binary's scanners until the host stops it; call it
// from main and nothing else:
//
//	func main() { scannerapi.Serve(leaseexpiry.New()) }
//
// One binary may serve several scanners; their names must be unique and
// they must declare the same Info.APIVersion, which Serve offers in the
// handshake (a host refuses versions it does not run, with a message that
// names both sides' versions). Serve
// does not return. It exits with status 1 when the scanners are invalid
// (see ValidateInfo) or when the binary was not started by an ffscan host.
//
// Process hygiene: stdout belongs to the go-plugin handshake, so a plugin
// must never write to it (go-plugin redirects os.Stdout once serving);
// logs go to stderr through hclog in JSON, and the host re-logs them under
// the scanner's name (get the logger with Logger(ctx)). The plugin exits
// when its parent process goes away, even if the launcher's Pdeathsig did
// not fire (it is Linux-only and tied to the launching thread).
func Serve(scanners ...Scanner) {
	level := hclog.LevelFromString(os.Getenv(wire.LogLevelEnv))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Output:     os.Stderr,
		JSONFormat: true,
		Level:      level,
	})
	srv, err := newPluginServer(logger, scanners)
	if err != nil {
		logger.Error("refusing to serve", "error", err)
		os.Exit(1)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// A plugin's live heap is a few MiB, so at Go's default target
		// (collect when the heap doubles) it collected many times a
		// second under load: a fifth of its CPU in the lease_expiry
		// drain. Five times the live heap costs a few more MiB.
		debug.SetGCPercent(pluginGCPercent)
	}
	go watchParent(os.Getppid(), parentPollInterval, func(ppid int) {
		logger.Error("parent process is gone; exiting", "original_parent", ppid, "parent", os.Getppid())
		os.Exit(3)
	})
	hs := wire.Handshake()
	hs.ProtocolVersion = uint(srv.apiVersion)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: servePluginSets(srv.apiVersion, &grpcPlugin{server: srv}),
		GRPCServer:       wire.NewGRPCServer,
		Logger:           logger,
	})
	os.Exit(0)
}

// watchParent calls gone once the process's parent is no longer ppid (the
// parent died and the process was re-parented).
func watchParent(ppid int, every time.Duration, gone func(ppid int)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			gone(ppid)
			return
		}
	}
}

// pluginGCPercent is the GC target Serve sets when GOGC is not in the
// plugin's environment.
const pluginGCPercent = 400

// pluginServer serves the Scanner service inside a plugin process.
type pluginServer struct {
	pb.UnimplementedScannerServer

	logger hclog.Logger
	// apiVersion is the contract version all scanners declare; Serve
	// offers it in the handshake.
	apiVersion int
	order      []string
	scanners   map[string]Scanner
	infos      map[string]Info
	loggers    map[string]hclog.Logger
	broker     *plugin.GRPCBroker // set by grpcPlugin.GRPCServer

	mu       sync.Mutex
	cbConn   *grpc.ClientConn
	cbID     uint32
	callback pb.HostCallbacksClient
	// stream carries the batches when the host serves a batch stream
	// (InfoRequest.callback_fd or exec_stream); nil means one unary Exec
	// per batch.
	stream     *wire.ExecStream
	fdStream   *wire.ExecStream // on the inherited socket, once opened
	grpcStream *wire.ExecStream
}

func newPluginServer(logger hclog.Logger, scanners []Scanner) (*pluginServer, error) {
	if len(scanners) == 0 {
		return nil, fmt.Errorf("scannerapi: Serve needs at least one scanner")
	}
	s := &pluginServer{
		logger:   logger,
		scanners: make(map[string]Scanner, len(scanners)),
		infos:    make(map[string]Info, len(scanners)),
		loggers:  make(map[string]hclog.Logger, len(scanners)),
	}
	for _, sc := range scanners {
		if sc == nil {
			return nil, fmt.Errorf("scannerapi: Serve got a nil scanner")
		}
		info := sc.Info()
		if err := ValidateInfo(info); err != nil {
			return nil, err
		}
		if s.apiVersion == 0 {
			s.apiVersion = info.APIVersion
		} else if info.APIVersion != s.apiVersion {
			return nil, fmt.Errorf("scannerapi: scanners of one plugin must declare the same APIVersion: %s declares %d, %s declares %d", s.order[0], s.apiVersion, info.Name, info.APIVersion)
		}
		if _, dup := s.scanners[info.Name]; dup {
			return nil, fmt.Errorf("scannerapi: two scanners are named %q", info.Name)
		}
		s.order = append(s.order, info.Name)
		s.scanners[info.Name] = sc
		s.infos[info.Name] = info
		s.loggers[info.Name] = logger.Named(info.Name).With("scanner", info.Name)
	}
	return s, nil
}

func (s *pluginServer) lookup(name string) (Scanner, hclog.Logger, error) {
	sc, ok := s.scanners[name]
	if !ok {
		return nil, nil, status.Errorf(codes.NotFound, "this plugin serves no scanner named %q", name)
	}
	return sc, s.loggers[name], nil
}

// connectCallbacks dials the host's callback service once. The broker only
// keeps the connection info for a few seconds, which is why the host sends
// the id in Info, right after launch, and why we dial before answering.
func (s *pluginServer) connectCallbacks(id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.callback != nil {
		if s.cbID != id {
			return fmt.Errorf("callback channel already connected to broker id %d, not %d", s.cbID, id)
		}
		return nil
	}
	if s.broker == nil {
		return fmt.Errorf("no go-plugin broker")
	}
	conn, err := s.broker.DialWithOptions(id, wire.DialOptions()...)
	if err != nil {
		return fmt.Errorf("dial host callbacks (broker id %d): %w", id, err)
	}
	s.cbConn, s.cbID, s.callback = conn, id, pb.NewHostCallbacksClient(conn)
	return nil
}

func (s *pluginServer) callbacks() (pb.HostCallbacksClient, *wire.ExecStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.callback, s.stream
}

// chooseStream picks how batches go to the host, from what it offers:
// the inherited socket, else the gRPC stream, else one unary Exec each.
func (s *pluginServer) chooseStream(req *pb.InfoRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case req.GetCallbackFd() != 0:
		if s.fdStream == nil {
			c, err := wire.OpenCallbackFD(req.GetCallbackFd())
			if err != nil {
				return err
			}
			s.fdStream = wire.FDExecStream(wire.NewPluginSocket(c, s.ScanPartition))
		}
		s.stream = s.fdStream
	case req.GetExecStream() && s.callback != nil:
		if s.grpcStream == nil {
			s.grpcStream = wire.GRPCExecStream(s.callback)
		}
		s.stream = s.grpcStream
	default:
		s.stream = nil
	}
	return nil
}

func (s *pluginServer) Info(_ context.Context, req *pb.InfoRequest) (*pb.InfoResponse, error) {
	// With the socket pair the host handed it, the plugin needs no other
	// channel: it dials nothing. A confined plugin may not connect() to
	// any socket (the host's sandbox refuses it), so only a host that
	// offers no socket pair has it dial the broker.
	if id := req.GetCallbackBrokerId(); id != 0 && req.GetCallbackFd() == 0 {
		if err := s.connectCallbacks(id); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	if err := s.chooseStream(req); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := &pb.InfoResponse{Pid: int64(os.Getpid()), ScansOnSocket: req.GetCallbackFd() != 0}
	for _, name := range s.order {
		out.Scanners = append(out.Scanners, infoToPB(s.infos[name]))
	}
	return out, nil
}

func (s *pluginServer) Configure(ctx context.Context, req *pb.ConfigureRequest) (_ *pb.ConfigureResponse, err error) {
	sc, log, err := s.lookup(req.GetScanner())
	if err != nil {
		return nil, err
	}
	defer scancall.Recover(req.GetScanner(), "Configure", &err)
	if err := sc.Configure(scancall.WithLogger(ctx, log), req.GetOptions()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pb.ConfigureResponse{}, nil
}

func (s *pluginServer) ScanPartition(ctx context.Context, req *pb.ScanPartitionRequest) (_ *pb.ScanPartitionResponse, err error) {
	name := req.GetScanner()
	sc, log, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				log.Error("scan failed", "error", err)
				err = status.Error(codes.Unknown, err.Error())
			}
		}
	}()
	defer scancall.Recover(name, "ScanPartition", &err) // runs first
	host := &pluginHost{srv: s, scanner: name, callID: req.GetCallId()}
	sreq := scanRequestFromPB(name, req.GetRequest())
	storeepoch.Observe(sreq.StoreEpoch)
	res, err := sc.ScanPartition(scancall.WithLogger(ctx, log), host, sreq)
	if err != nil {
		return nil, err
	}
	return &pb.ScanPartitionResponse{Result: scanResultToPB(res)}, nil
}

func (s *pluginServer) SampleBacklog(ctx context.Context, req *pb.SampleBacklogRequest) (_ *pb.SampleBacklogResponse, err error) {
	name := req.GetScanner()
	sc, log, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				err = status.Error(codes.Unknown, err.Error())
			}
		}
	}()
	defer scancall.Recover(name, "SampleBacklog", &err) // runs first
	parts := make([]keys.Partition, len(req.GetPartitions()))
	for i, p := range req.GetPartitions() {
		parts[i] = partitionFromPB(p)
	}
	sampler, ok := sc.(BacklogSampler)
	if !ok {
		return &pb.SampleBacklogResponse{}, nil // not measured
	}
	host := &pluginHost{srv: s, scanner: name, callID: req.GetCallId()}
	depths, err := sampler.SampleBacklog(scancall.WithLogger(ctx, log), host, parts)
	if err != nil {
		return nil, err
	}
	return &pb.SampleBacklogResponse{Present: depths != nil, Depths: depths}, nil
}

func (s *pluginServer) Ping(context.Context, *pb.PingRequest) (*pb.PingResponse, error) {
	return &pb.PingResponse{Pid: int64(os.Getpid())}, nil
}

// pluginHost is the Host a scanner gets inside a plugin process: each Exec
// is one callback to the host, bound to the host call in flight.
type pluginHost struct {
	srv     *pluginServer
	scanner string
	callID  uint64
}

func (h *pluginHost) Exec(ctx context.Context, cmds []Command) ([]Reply, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	cb, stream := h.srv.callbacks()
	if cb == nil && stream == nil {
		return nil, fmt.Errorf("scannerapi: the host callback channel is not connected")
	}
	if stream != nil {
		req := &pb.ExecRequest{Scanner: h.scanner, CallId: h.callID}
		size := codec.CommandsSize(cmds)
		if stream.Copies() {
			// Exec has sent the batch (or failed to) when it returns.
			buf := wire.GetBatchBuffer(size)
			req.PackedCommands = codec.AppendCommands(*buf, cmds)
			defer wire.PutBatchBuffer(buf, req.PackedCommands)
		} else {
			req.PackedCommands = codec.AppendCommands(make([]byte, 0, size), cmds)
		}
		resp, err := stream.Exec(ctx, req)
		if err != nil {
			return nil, err
		}
		return streamReplies(resp, len(cmds))
	}
	resp, err := cb.Exec(ctx, &pb.ExecRequest{Scanner: h.scanner, CallId: h.callID, Commands: codec.CommandsToPB(cmds)})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			return nil, fmt.Errorf("host exec: %s: %s", st.Code(), st.Message())
		}
		return nil, fmt.Errorf("host exec: %w", err)
	}
	if len(resp.GetReplies()) != len(cmds) {
		return nil, fmt.Errorf("host exec: %d replies to %d commands", len(resp.GetReplies()), len(cmds))
	}
	return repliesFromPB(resp.GetReplies()), nil
}

// streamReplies unpacks a stream response to a batch of n commands.
func streamReplies(resp *pb.ExecResponse, n int) ([]Reply, error) {
	if code := resp.GetErrorCode(); code != 0 {
		return nil, fmt.Errorf("host exec: %s: %s", codes.Code(code), resp.GetErrorMessage())
	}
	replies, err := unpackReplies(resp.GetPackedReplies())
	if err != nil {
		return nil, fmt.Errorf("host exec: %w", err)
	}
	if len(replies) != n {
		return nil, fmt.Errorf("host exec: %d replies to %d commands", len(replies), n)
	}
	return replies, nil
}

// Explain answers the Explain RPC: the scanner's Explain when it
// implements Explainer, else explained=false ("does not explain").
func (s *pluginServer) Explain(ctx context.Context, req *pb.ExplainRequest) (_ *pb.ExplainResponse, err error) {
	name := req.GetScanner()
	sc, log, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	ex, ok := sc.(Explainer)
	if !ok {
		return &pb.ExplainResponse{}, nil
	}
	defer func() {
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				err = status.Error(codes.Unknown, err.Error())
			}
		}
	}()
	defer scancall.Recover(name, "Explain", &err) // runs first
	host := &pluginHost{srv: s, scanner: name, callID: req.GetCallId()}
	ereq := &ExplainRequest{Scan: *scanRequestFromPB(name, req.GetRequest()), ExecutionID: req.GetExecutionId()}
	e, err := ex.Explain(scancall.WithLogger(ctx, log), host, ereq)
	if err != nil {
		return nil, err
	}
	return explanationToPB(e), nil
}
