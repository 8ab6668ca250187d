// Package boot prepares the keyspace before any scanner runs: it connects to
// Valkey, agrees on the partition counts recorded in ff:config:partitions
// and makes sure our Functions library is loaded (the lanes are
// host/lanes'). Each step is a function of its own so the CLI's one-shot commands
// can reuse them.
package boot

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// Connect opens a valkey-go client as the config says. Client-side caching
// is off: the host only pipelines reads and FCALLs whose results must be
// current.
//
// The client's own retries are off as well. A read-only command whose
// connection broke is sent again on a new one, and valkey-go recycles it
// once that retry succeeds while the broken connection's writer goroutine
// may still have read it last: the next command built reuses memory that
// no synchronisation orders after that read (the race detector reported
// it in the host's reads, FCALLs and audit appends after a server
// restart). Without retries such a command comes back with its transport
// error and is never recycled, and the host answers the error as it
// answers any transport error: the scheduler drops what it learned on the
// store and reads again at its next cycle, and a plugin's callback gets
// the error, so its scan fails and is run again.
func Connect(ctx context.Context, c config.Valkey) (valkey.Client, error) {
	opt := valkey.ClientOption{
		InitAddress:       c.Addrs,
		Username:          c.Username,
		Password:          c.Password,
		DisableCache:      true,
		DisableRetry:      true,
		ForceSingleClient: c.Cluster == "off",
	}
	if c.TLS.Enabled {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLS.ServerName}
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("valkey.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("valkey.tls.ca_file: %s holds no PEM certificate", c.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		opt.TLSConfig = tc
	}
	client, err := valkey.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to valkey %s: %w", strings.Join(c.Addrs, ","), err)
	}
	if c.Cluster == "on" {
		info, err := client.Do(ctx, client.B().Info().Section("cluster").Build()).ToString()
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("valkey.cluster is on: INFO cluster: %w", err)
		}
		if !strings.Contains(info, "cluster_enabled:1") {
			client.Close()
			return nil, errors.New("valkey.cluster is on but the server is not a cluster node")
		}
	}
	return client, nil
}

// EnsurePartitions records want in ff:config:partitions when the hash is
// absent and otherwise checks it against what is stored. The HSETNXs and the
// read-back run in one MULTI, so two hosts booting at once cannot both
// "create" different values: whichever runs second reads the first one's
// counts and is refused. It returns the stored counts and whether this call
// created any field.
func EnsurePartitions(ctx context.Context, client valkey.Client, want keys.PartitionConfig) (keys.PartitionConfig, bool, error) {
	if err := want.Validate(); err != nil {
		return want, false, err
	}
	b := client.B()
	f := want.HashFields()
	cmds := valkey.Commands{b.Multi().Build()}
	for i := 0; i < len(f); i += 2 {
		cmds = append(cmds, b.Hsetnx().Key(keys.ConfigPartitions).Field(f[i]).Value(f[i+1]).Build())
	}
	cmds = append(cmds, b.Hgetall().Key(keys.ConfigPartitions).Build(), b.Exec().Build())
	res := client.DoMulti(ctx, cmds...)
	execRes, err := res[len(res)-1].ToArray()
	if err != nil {
		// An aborted transaction says only that: name the command that
		// was refused (MOVED: valkey.cluster is off but the server is a
		// cluster node that does not serve the key).
		for _, r := range res[:len(res)-1] {
			if qerr := r.Error(); qerr != nil {
				err = fmt.Errorf("%w (queued command refused: %v)", err, qerr)
				break
			}
		}
		return want, false, fmt.Errorf("%s: MULTI/HSETNX/HGETALL: %w", keys.ConfigPartitions, err)
	}
	if len(execRes) != len(f)/2+1 {
		return want, false, fmt.Errorf("%s: EXEC returned %d replies, want %d", keys.ConfigPartitions, len(execRes), len(f)/2+1)
	}
	created := false
	for _, r := range execRes[:len(f)/2] {
		if n, _ := r.AsInt64(); n == 1 {
			created = true
		}
	}
	h, err := execRes[len(execRes)-1].AsStrMap()
	if err != nil {
		return want, created, fmt.Errorf("%s: read back: %w", keys.ConfigPartitions, err)
	}
	stored, err := checkStored(h, want)
	return stored, created, err
}

// checkStored parses the recorded partition counts and checks want
// against them; on a mismatch it returns the stored counts with the error.
func checkStored(h map[string]string, want keys.PartitionConfig) (keys.PartitionConfig, error) {
	stored, err := keys.ParsePartitionHash(h)
	if err != nil {
		return want, err
	}
	if err := want.CheckAgainst(stored); err != nil {
		return stored, err
	}
	return stored, nil
}

// ReadPartitions is EnsurePartitions without the write: the recorded counts
// checked against want, or want itself (recorded false) when none are
// recorded yet, for runs that must not change the keyspace.
func ReadPartitions(ctx context.Context, client valkey.Client, want keys.PartitionConfig) (keys.PartitionConfig, bool, error) {
	if err := want.Validate(); err != nil {
		return want, false, err
	}
	h, err := client.Do(ctx, client.B().Hgetall().Key(keys.ConfigPartitions).Build()).AsStrMap()
	if err != nil {
		return want, false, fmt.Errorf("%s: HGETALL: %w", keys.ConfigPartitions, err)
	}
	if len(h) == 0 {
		return want, false, nil
	}
	stored, err := checkStored(h, want)
	return stored, true, err
}

// LoadLibrary makes every primary serve a compatible flowfabric library and
// logs what it did on each node.
func LoadLibrary(ctx context.Context, client valkey.Client, force bool, log hclog.Logger) (*lua.Library, error) {
	lib := lua.New(client, lua.Options{ForceReplace: force})
	results, err := lib.Ensure(ctx)
	for _, r := range results {
		log.Info("lua library", "node", r.Node, "action", string(r.Action), "found", r.Found, "version", lua.Version())
	}
	if err != nil {
		return nil, err
	}
	return lib, nil
}
