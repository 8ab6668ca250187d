package main

// ffscan explain ID: what every scanner of a running host does with one
// execution on its next cycle, and why (GET /v1/explain/{id}).

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ffscan/ffscan/host/explain"
	"github.com/ffscan/ffscan/host/httpapi"
)

func cmdExplain(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("explain", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	raw := fs.Bool("json", false, "print the JSON report")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	a, err := hostAddr(fs, c, *addr)
	if err != nil {
		return err
	}
	body, rep, err := httpapi.Client{Addr: a}.Explain(pos[0], 15*time.Second)
	if err != nil {
		return err
	}
	if *raw {
		_, err = stdout.Write(body)
		return err
	}
	printExplain(stdout, rep)
	return nil
}

// printExplain writes a report for a person: the execution, its entries,
// then one line per scanner, those that act or wait first.
func printExplain(w io.Writer, r *explain.Report) {
	now := time.UnixMilli(r.NowMs)
	fmt.Fprintf(w, "execution %s (partition %s, %s)\n", r.ExecutionID, r.Partition, r.Store)
	if !r.Found {
		fmt.Fprintln(w, "  core: not found")
	} else {
		var parts []string
		for _, f := range []string{"lifecycle_phase", "ownership_state", "eligibility_state", "public_state", "blocking_reason", "lane_id", "flow_id"} {
			if v := r.Core[f]; v != "" {
				parts = append(parts, f+"="+v)
			}
		}
		fmt.Fprintf(w, "  core: %s\n", strings.Join(parts, " "))
	}
	switch {
	case r.Owner != "" && !r.Owned:
		fmt.Fprintf(w, "  partition owned by host %s (this host does not scan it)\n", r.Owner)
	case r.Owner != "":
		fmt.Fprintf(w, "  partition owned by this host (%s)\n", r.Owner)
	}
	seen := map[string]bool{}
	for _, e := range r.Entries {
		k := e.Key + "\x00" + e.Member
		if seen[k] {
			continue
		}
		seen[k] = true
		due := "due"
		if !e.Due {
			due = "due in " + (time.Duration(int64(e.Score)-r.NowMs) * time.Millisecond).String()
		}
		fmt.Fprintf(w, "  in %s (member %s, score %.0f, %s)\n", e.Key, e.Member, e.Score, due)
	}
	for _, s := range r.Inconsistent {
		fmt.Fprintf(w, "  INCONSISTENT: %s\n", s)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCANNER\tVERDICT\tWHY\tWHEN")
	for _, pass := range [][]string{{"acts", "waits", "skips"}, nil} {
		for _, v := range r.Scanners {
			first := v.Verdict == "acts" || v.Verdict == "waits" || v.Verdict == "skips"
			if (pass != nil) != first {
				continue
			}
			why := v.Detail
			if v.Reason != "" && !strings.Contains(why, v.Reason) {
				why = v.Reason + ": " + why
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Scanner, v.Verdict, why, when(v, now))
		}
	}
	_ = tw.Flush()
	if len(r.History) > 0 || r.HistoryError != "" {
		fmt.Fprintln(w, "\nwhat happened (the audit trail, newest first):")
		if r.HistoryError != "" {
			fmt.Fprintf(w, "  (not read: %s)\n", oneLine(r.HistoryError))
		}
		printAudit(w, r.History)
	}
}

// when says when a verdict applies: the due time, the next cycle, the
// end of a backoff.
func when(v explain.Verdict, now time.Time) string {
	var parts []string
	if v.DueAt != nil && v.Verdict == "waits" {
		parts = append(parts, "due "+v.DueAt.UTC().Format("15:04:05.000")+" (in "+v.DueAt.Sub(now).Round(time.Millisecond).String()+")")
	}
	if v.BackoffUntilCycle > 0 {
		parts = append(parts, fmt.Sprintf("backoff until cycle %d (now %d)", v.BackoffUntilCycle, v.Cycle))
	}
	if v.NextCycleAt != nil && (v.Verdict == "acts" || v.Verdict == "waits" || v.Verdict == "skips") {
		parts = append(parts, "next cycle "+v.NextCycleAt.UTC().Format("15:04:05.000"))
	}
	return strings.Join(parts, "; ")
}
