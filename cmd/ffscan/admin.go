package main

// ffscan status and ffscan reload: requests to a running host.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ffscan/ffscan/host/admintoken"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
)

// hostAddr is the HTTP address of the running host: --addr, else the
// configuration's http.listen, read without judging the rest of the file
// (a mistake elsewhere in it is the running host's to refuse on reload).
func hostAddr(fs *flag.FlagSet, c *common, addr string) (string, error) {
	if addr == "" {
		var err error
		if addr, err = config.HTTPListen(c.sources(fs)); err != nil {
			return "", fmt.Errorf("%w (pass --addr host:port)", err)
		}
	}
	if addr == "" {
		return "", usageError{errors.New("no address: http.listen is empty; pass --addr")}
	}
	return addr, nil
}

// adminClient is the client of an admin command: the host's address
// (hostAddr) and its admin token, read from --token-file, else the
// configuration's http.admin_token_file, else the default place.
func adminClient(fs *flag.FlagSet, c *common, addr, tokenFile string) (httpapi.Client, error) {
	a, err := hostAddr(fs, c, addr)
	if err != nil {
		return httpapi.Client{}, err
	}
	if tokenFile == "" {
		if tokenFile, err = config.AdminTokenFile(c.sources(fs)); err != nil {
			return httpapi.Client{}, fmt.Errorf("%w (pass --token-file)", err)
		}
	}
	path, err := admintoken.Resolve(tokenFile)
	if err != nil {
		return httpapi.Client{}, err
	}
	tok, err := admintoken.Read(path)
	if err != nil {
		return httpapi.Client{}, fmt.Errorf("%w (the host writes it at its first start with http.admin on; run this as the host's user, or pass --token-file)", err)
	}
	return httpapi.Client{Addr: a, Token: tok}, nil
}

const tokenFileUsage = "file holding the host's admin token (default: http.admin_token_file, else ~/.config/ffscan/admin-token)"

func cmdReload(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("reload", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	tokenFile := fs.String("token-file", "", tokenFileUsage)
	if err := parse(fs, args); err != nil {
		return err
	}
	cl, err := adminClient(fs, c, *addr, *tokenFile)
	if err != nil {
		return err
	}
	var res httpapi.ReloadResult
	if _, err := cl.Post("/v1/reload", 2*time.Minute, &res); err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	fmt.Fprintln(stdout, "configuration reloaded")
	for _, l := range []struct {
		what  string
		names []string
	}{{"started", res.Started}, {"stopped", res.Stopped}, {"retuned", res.Retuned}} {
		if len(l.names) > 0 {
			fmt.Fprintf(stdout, "  %s: %s\n", l.what, strings.Join(l.names, ", "))
		}
	}
	failed := 0
	for _, p := range res.Plugins {
		fmt.Fprintf(stdout, "  %s: %s\n", p.Scanner, describeSwap(p))
		if p.Error != "" {
			failed++
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	if failed > 0 {
		return fmt.Errorf("%d scanner(s) kept their running plugin", failed)
	}
	return nil
}

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("status", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	raw := fs.Bool("json", false, "print the raw JSON document")
	watch := fs.Duration("watch", 0, "print a compact view with rates every DURATION (e.g. 3s) until interrupted")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *watch != 0 && (*watch < 100*time.Millisecond || *raw) {
		return usageError{errors.New("--watch takes a duration of at least 100ms, and not with --json")}
	}
	a, err := hostAddr(fs, c, *addr)
	if err != nil {
		return err
	}
	cl := httpapi.Client{Addr: a}
	if *watch > 0 {
		return watchStatus(cl, *watch, stdout)
	}
	if *raw {
		body, err := cl.RawStatus(5 * time.Second)
		if err != nil {
			return err
		}
		_, err = stdout.Write(body)
		return err
	}
	doc, err := cl.Status(5 * time.Second)
	if err != nil {
		return err
	}
	printStatus(stdout, doc)
	return nil
}

func printStatus(w io.Writer, doc httpapi.StatusDoc) {
	printHostLines(w, doc)
	fmt.Fprintln(w)
	printScannerTable(w, doc.Scanners)
	for _, s := range doc.Scanners {
		fmt.Fprintf(w, "%s: %s\n", s.Name, strings.Join(scannerNotes(s), "; "))
	}
}

// printHostLines writes the host's lines: version, stores, lanes,
// configuration, completions, sharing.
func printHostLines(w io.Writer, doc httpapi.StatusDoc) {
	valkeyLine := "valkey " + strings.Join(doc.Valkey, ",")
	if len(doc.Valkey) == 0 {
		valkeyLine = "no valkey (postgres only)"
	}
	if len(doc.ValkeyNodes) > 0 {
		valkeyLine = fmt.Sprintf("valkey cluster masters %s (seeds %s)", strings.Join(doc.ValkeyNodes, ","), strings.Join(doc.Valkey, ","))
	}
	lanes := strings.Join(doc.Lanes, ",")
	if len(doc.Lanes) > 8 {
		lanes = fmt.Sprintf("%d (%s, ...)", len(doc.Lanes), strings.Join(doc.Lanes[:8], ","))
	}
	if doc.LaneCensus != "" && doc.LaneCensus != "off" {
		lanes += " (lane census " + doc.LaneCensus + ")"
	}
	fmt.Fprintf(w, "ffscan %s (scanner API %s), up since %s, %s, lanes %s\n", doc.Version, doc.ScannerAPI, doc.StartedAt.Format(time.RFC3339), valkeyLine, lanes)
	if pg := doc.Postgres; pg != nil {
		fmt.Fprintf(w, "postgres: %s, ffscan library %d, filter %s, %d of %d connections open, %d in use, %d for the candidate reads, %d action slots of %d shared\n",
			pg.Schema, pg.Library, pg.Filter, pg.Connections, pg.PoolSize, pg.InUse, pg.ReadConnections, pg.ActionSlots, pg.SharedTransactions)
		if c := pg.Completions; c != nil {
			listening := "listening"
			switch {
			case c.Standby:
				listening = "on standby (the owner of flow partition 0 listens for the hosts that share the partitions)"
			case !c.Listening:
				listening = "NOT listening (connecting, or reconnecting: see the log)"
			}
			fmt.Fprintf(w, "postgres completions: %s, %d notifications, %d drains, %d dispatched (%d already done, %d filtered), %d errors, %d reconnects\n",
				listening, c.Notifications, c.Drains, c.Dispatched, c.AlreadyDone, c.Filtered, c.Errors, c.Reconnects)
		}
	}
	fmt.Fprintln(w, configLine(doc.Config))
	if ke := doc.KeyEvents; ke != nil {
		if ke.On {
			fmt.Fprintf(w, "key events: on (%d events, %d gaps): partitions read empty are read again when one of their keys is created\n", ke.Events, ke.Gaps)
		} else {
			fmt.Fprintf(w, "key events: off (%s): every partition is read at every interval\n", ke.Reason)
		}
	}
	if cs := doc.Completions; cs != nil {
		sub := "subscribed"
		if !cs.Subscribed {
			sub = "NOT subscribed"
		}
		fmt.Fprintf(w, "completions: %s, concurrency %d, %d messages (%d malformed, %d dropped), %d cascades (%d failed), %d edges resolved, %d reconnects\n",
			sub, cs.Concurrency, cs.Messages, cs.Malformed, cs.Dropped, cs.Dispatched, cs.Failed, cs.Resolved, cs.Reconnects)
	} else {
		fmt.Fprintln(w, "completions: disabled")
	}
	if sh := doc.Sharing; sh != nil {
		var fams []string
		for _, f := range []string{"flow", "budget", "quota"} {
			fams = append(fams, fmt.Sprintf("%s %d/%d", f, sh.Owned[f], sh.Totals[f]))
		}
		where := "this keyspace"
		if sh.Store != "" && sh.Store != "valkey" {
			where = "this database " + strings.TrimPrefix(sh.Store, "postgres ")
		}
		fmt.Fprintf(w, "sharing: %d host(s) on %s; this host (%s) owns %s partitions\n",
			len(sh.Hosts), where, sh.HostID, strings.Join(fams, ", "))
		if sh.LastError != "" {
			fmt.Fprintf(w, "sharing: %d renewal(s) failed; the last: %s\n", sh.Failures, oneLine(sh.LastError))
		}
	}
}

// configLine is the configuration's line: its file, when it was loaded,
// its reloads and the last refusal.
func configLine(c httpapi.ConfigStatus) string {
	line := "config: loaded " + c.LoadedAt.Format(time.RFC3339)
	if c.File != "" {
		line = "config: " + c.File + ", loaded " + c.LoadedAt.Format(time.RFC3339)
	}
	if len(c.FileSHA256) >= 12 {
		line += " (sha256 " + c.FileSHA256[:12] + ")"
	}
	line += fmt.Sprintf(", generation %d, %d reload(s), %d refused", c.Generation, c.Reloads, c.Refused)
	if c.LastError != "" {
		at := ""
		if c.LastErrorAt != nil {
			at = " at " + c.LastErrorAt.Format("15:04:05")
		}
		line += "; last refusal" + at + ": " + oneLine(c.LastError)
	}
	return line
}

// printScannerTable writes one row per scanner.
func printScannerTable(w io.Writer, scanners []httpapi.ScannerStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCANNER\tENABLED\tSTATE\tPID\tVERSION\tAPI\tSHA256\tRESTARTS\tSWAPS\tCYCLE\tLAST CYCLE\tPROCESSED\tERRORS\tBACKLOG")
	for _, s := range scanners {
		last, backlog, api, sha := "-", "-", "-", "-"
		if s.LastCycleAt != nil {
			last = s.LastCycleAt.Format("15:04:05") + " (" + s.LastCycleDuration + ")"
		}
		if s.Backlog != nil {
			backlog = fmt.Sprint(*s.Backlog)
		}
		if s.APIVersion > 0 {
			api = fmt.Sprint(s.APIVersion)
		}
		if len(s.SHA256) >= 12 {
			sha = s.SHA256[:12]
		}
		version := s.Version
		if version == "" {
			version = "-"
		}
		state := s.State
		if s.Mode == "shadow" {
			state += " (shadow)"
		}
		if s.Paused != nil {
			state = "paused: action budget"
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n",
			s.Name, s.Enabled, state, s.Pid, version, api, sha, s.Restarts, s.Swaps, s.Cycle, last, s.Processed, s.Errors, backlog)
	}
	_ = tw.Flush()
}

// scannerNotes are what a scanner's row leaves out: its plugin, tuning,
// confinement, policy, last swap and errors.
func scannerNotes(s httpapi.ScannerStatus) []string {
	var notes []string
	if s.Path != "" {
		notes = append(notes, "plugin "+s.Path)
	} else {
		notes = append(notes, "plugin "+s.Plugin)
	}
	if s.Interval != "" {
		notes = append(notes, fmt.Sprintf("interval %s, batch %d", s.Interval, s.Batch))
	}
	if s.Isolation != "" {
		notes = append(notes, "isolation: "+s.Isolation)
	}
	if s.Bounds != "" {
		notes = append(notes, "bounds: "+s.Bounds)
	}
	if sh := s.Shadow; sh != nil {
		line := fmt.Sprintf("shadow: %d writes held back", sh.WouldAct)
		if s.Mode != "shadow" {
			line += " (while it ran in shadow mode; it acts now)"
		}
		if len(sh.Latest) > 0 {
			line += "; latest: " + oneLine(sh.Latest[0].String())
		}
		notes = append(notes, line)
	}
	if p := s.Paused; p != nil {
		line := fmt.Sprintf("PAUSED since %s: %s (ffscan scanners resume %s)", p.Since.UTC().Format("15:04:05"), oneLine(p.Reason), s.Name)
		if p.Until != nil {
			line = fmt.Sprintf("PAUSED since %s until %s: %s", p.Since.UTC().Format("15:04:05"), p.Until.UTC().Format("15:04:05"), oneLine(p.Reason))
		}
		notes = append(notes, line)
	}
	if cs := s.Canary; cs != nil {
		line := fmt.Sprintf("canary %s: sha256 %s, %d cycles compared, %d items differed", cs.State, short(cs.To.SHA256), cs.Cycles, cs.Differences())
		if cs.Active() {
			line += fmt.Sprintf(" (ffscan plugins canary %s --status | --promote | --abort)", s.Name)
		} else if cs.Reason != "" {
			line += ": " + oneLine(cs.Reason)
		}
		notes = append(notes, line)
	}
	if r := s.Resources; r != nil {
		notes = append(notes, fmt.Sprintf("using %d MiB, %.1f CPU-s (%.1f s throttled), %d tasks", r.MemoryBytes>>20, r.CPUSeconds, r.ThrottledSeconds, r.Tasks))
	}
	if s.Policy != "" {
		notes = append(notes, "approved policy "+s.Policy[:min(12, len(s.Policy))])
	}
	if ls := s.LastSwap; ls != nil {
		swap := fmt.Sprintf("last swap %s %s", ls.At.Format("15:04:05"), ls.Outcome)
		if ls.Reason != "" {
			swap += " (" + oneLine(ls.Reason) + ")"
		}
		notes = append(notes, swap)
	}
	if s.NotApplied != "" {
		notes = append(notes, "NOT APPLIED: "+oneLine(s.NotApplied))
	}
	if s.LastError != "" {
		notes = append(notes, "last error: "+oneLine(s.LastError))
	}
	if s.LastScanError != "" {
		notes = append(notes, "last scan error: "+oneLine(s.LastScanError))
	}
	return notes
}

// oneLine folds a multi-line message (a configuration error lists every
// problem on its own line) into one line for the status table.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, ":\n", ": ")), " ")
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, " ")
}
