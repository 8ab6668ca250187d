package main

// ffscan audit: the trail of what scanners and operators did, read from
// a running host (GET /v1/audit); and the record of the operator actions
// the CLI takes without a host.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/postgres"
)

func cmdAudit(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("audit", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	execution := fs.String("execution", "", "only the entries about this execution ({fp:N}:uuid)")
	scanner := fs.String("scanner", "", "only this scanner's entries (and operator actions on it)")
	kind := fs.String("kind", "", "only scanner or operator entries")
	since := fs.Duration("since", 0, "only entries of the last DURATION (e.g. 1h; 0: any)")
	limit := fs.Int("limit", 100, "at most this many entries, newest first")
	asJSON := fs.Bool("json", false, "print the entries as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *kind != "" && *kind != audit.KindScanner && *kind != audit.KindOperator {
		return usageError{fmt.Errorf("--kind %q: want scanner or operator", *kind)}
	}
	a, err := hostAddr(fs, c, *addr)
	if err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"execution": *execution, "scanner": *scanner, "kind": *kind} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *since > 0 {
		q.Set("since", since.String())
	}
	q.Set("limit", strconv.Itoa(*limit))
	entries, err := (httpapi.Client{Addr: a}).Audit(q, 30*time.Second)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	if len(entries) == 0 {
		fmt.Fprintln(stdout, "no entries")
		return nil
	}
	printAudit(stdout, entries)
	return nil
}

// printAudit shows entries one per line.
func printAudit(w io.Writer, entries []audit.Entry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range entries {
		at := e.At.UTC().Format("2006-01-02 15:04:05.000")
		if e.Kind == audit.KindOperator {
			fmt.Fprintf(tw, "  %s\toperator\t%s\t%s\tvia %s\t%s\t%s\n", at, oneLine(e.Action), oneLine(e.Scanner), oneLine(e.Channel), oneLine(e.Who), oneLine(e.Detail))
			continue
		}
		what := e.Execution
		if what == "" {
			what = e.Key
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\tplugin %s\n", at, oneLine(e.Scanner), oneLine(e.Command), oneLine(what), oneLine(e.Outcome), short(e.Digest))
	}
	_ = tw.Flush()
}

// recordAction writes an operator action taken by a command that runs no
// host (an approval, a pin written into the configuration) to the audit
// trail, as the running hosts' own actions are: in the store the
// configuration names, with channel cli and the operating-system user.
// The action itself is done when this runs; a trail that cannot be
// written is said on stderr (and the command still reports success:
// undoing an approval for want of its record would surprise more).
func recordAction(cfg *config.Config, action, scanner, detail string, stderr io.Writer) {
	if !cfg.Audit.Enabled {
		return
	}
	e := audit.Entry{Kind: audit.KindOperator, Host: "cli on " + hostName(), Action: action, Channel: audit.ChannelCLI,
		Who: "user " + userName(), Scanner: scanner, Detail: detail}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch {
	case len(cfg.Valkey.Addrs) > 0:
		// A host with Valkey keeps its trail there, Postgres or not.
		var client valkey.Client
		if client, err = boot.Connect(ctx, cfg.Valkey); err == nil {
			defer client.Close()
			err = audit.AppendValkey(ctx, client, cfg.Audit.MaxEntries, e)
		}
	case cfg.Postgres.DSN != "":
		var pool *pgxpool.Pool
		if pool, err = postgres.Connect(ctx, postgres.Options{DSN: cfg.Postgres.DSN, PoolSize: 1,
			Transaction: cfg.Postgres.Pooling == config.PoolingTransaction}); err == nil {
			defer pool.Close()
			err = audit.AppendPostgres(ctx, pool, cfg.Audit.MaxEntries, e)
		}
	default:
		err = errors.New("the configuration names no store")
	}
	if err != nil {
		fmt.Fprintf(stderr, "warning: %s of %s done, but not recorded in the audit trail: %v\n", action, scanner, err)
	}
}

func hostName() string {
	if n, err := os.Hostname(); err == nil {
		return n
	}
	return "unknown host"
}

func userName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}
