package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"
)

// DefaultNamespace is the namespace used when Options.Namespace is empty.
const DefaultNamespace = "default"

// Options configure a Client. The zero value is usable.
type Options struct {
	// Partitions is the partition layout this process was configured
	// with. When set (non-zero), New refuses a server whose
	// ff:config:partitions differs, naming both values. When zero, the
	// stored layout is adopted.
	Partitions keys.PartitionConfig

	// RequireStoredPartitions refuses to start when ff:config:partitions
	// does not exist. By default a missing hash means "use Partitions, or
	// FlowFabric's defaults" (FlowFabric's readers do the same), which
	// suits a fresh development server.
	RequireStoredPartitions bool

	// Namespace is the default namespace of created executions.
	// Default DefaultNamespace.
	Namespace string

	// Identity is stored as creator_identity on created executions.
	// Default "ffscan-client".
	Identity string

	// Limits bound what producers may send. Zero fields take the defaults
	// of DefaultLimits.
	Limits Limits

	// Library is the flowfabric library handle to call through. Default:
	// lua.New(valkeyClient, lua.Options{}); share one when several clients
	// use the same connection.
	Library *lua.Library

	// Logger receives the client's and worker's logs. Default: a null
	// logger.
	Logger hclog.Logger
}

// Client is a connection to one FlowFabric keyspace for producers and, via
// NewWorker, workers. It is safe for concurrent use.
type Client struct {
	vk     valkey.Client
	lib    *lua.Library
	parts  keys.PartitionConfig
	ns     string
	ident  string
	limits Limits
	log    hclog.Logger
}

// New checks the server (PING), resolves the partition layout against
// ff:config:partitions and returns a Client. It does not load the library:
// calls load it on first use if the server lacks it (lua.Library.Do).
func New(ctx context.Context, vk valkey.Client, opts Options) (*Client, error) {
	if vk == nil {
		return nil, errors.New("client: nil valkey client")
	}
	c := &Client{
		vk:     vk,
		lib:    opts.Library,
		ns:     opts.Namespace,
		ident:  opts.Identity,
		limits: opts.Limits.withDefaults(),
		log:    opts.Logger,
	}
	if c.lib == nil {
		c.lib = lua.New(vk, lua.Options{})
	}
	if c.ns == "" {
		c.ns = DefaultNamespace
	}
	if c.ident == "" {
		c.ident = "ffscan-client"
	}
	if c.log == nil {
		c.log = hclog.NewNullLogger()
	}
	if err := vk.Do(ctx, vk.B().Ping().Build()).Error(); err != nil {
		return nil, fmt.Errorf("client: PING: %w", err)
	}
	parts, err := resolvePartitions(ctx, vk, opts.Partitions, opts.RequireStoredPartitions, c.log)
	if err != nil {
		return nil, err
	}
	c.parts = parts
	return c, nil
}

// resolvePartitions reads ff:config:partitions and reconciles it with the
// configured layout. A stored layout always wins over defaults, and a
// configured one must match it: two processes disagreeing on the counts
// would put the same lane or flow on different partitions.
func resolvePartitions(ctx context.Context, vk valkey.Client, configured keys.PartitionConfig, require bool, log hclog.Logger) (keys.PartitionConfig, error) {
	h, err := vk.Do(ctx, vk.B().Hgetall().Key(keys.ConfigPartitions).Build()).AsStrMap()
	if err != nil {
		return keys.PartitionConfig{}, fmt.Errorf("client: HGETALL %s: %w", keys.ConfigPartitions, err)
	}
	isSet := configured != (keys.PartitionConfig{})
	if isSet {
		if err := configured.Validate(); err != nil {
			return keys.PartitionConfig{}, fmt.Errorf("client: Options.Partitions: %w", err)
		}
	}
	if len(h) == 0 {
		if require {
			return keys.PartitionConfig{}, fmt.Errorf("client: %s does not exist; the deployment has not recorded its partition counts", keys.ConfigPartitions)
		}
		if !isSet {
			configured = keys.DefaultPartitionConfig()
		}
		log.Warn("partition config hash missing; using configured or default counts",
			"key", keys.ConfigPartitions, "flow", configured.Flow, "budget", configured.Budget, "quota", configured.Quota)
		return configured, nil
	}
	stored, err := keys.ParsePartitionHash(h)
	if err != nil {
		return keys.PartitionConfig{}, fmt.Errorf("client: %w", err)
	}
	if isSet {
		if err := configured.CheckAgainst(stored); err != nil {
			return keys.PartitionConfig{}, fmt.Errorf("client: %w", err)
		}
	}
	return stored, nil
}

// Partitions is the partition layout the client routes by.
func (c *Client) Partitions() keys.PartitionConfig { return c.parts }

// Namespace is the client's default namespace.
func (c *Client) Namespace() string { return c.ns }

// Library is the flowfabric library handle the client calls through.
func (c *Client) Library() *lua.Library { return c.lib }

// Valkey is the underlying valkey-go client.
func (c *Client) Valkey() valkey.Client { return c.vk }

// Logger is the client's logger.
func (c *Client) Logger() hclog.Logger { return c.log }
