package main

// ffscan status --watch: a compact live view (make run shows it).

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ffscan/ffscan/host/httpapi"
)

// watchLegend explains the compact table's columns in one line.
const watchLegend = "ITEMS/S: since the last sample. ERRS: scan errors. BACKLOG: due after the last full cycle."

// watchStatus prints a compact status every interval until SIGINT or
// SIGTERM, or until the host stops answering (then it fails).
func watchStatus(cl httpapi.Client, every time.Duration, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var prev *sample
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		doc, err := cl.Status(5 * time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the host stopped answering: %w", err)
		}
		cur := &sample{at: time.Now(), doc: doc}
		printCompact(stdout, prev, cur)
		prev = cur
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// sample is one status read and when it was taken.
type sample struct {
	at  time.Time
	doc httpapi.StatusDoc
}

// printCompact writes one screen of the compact view: a header line, the
// table (at most 100 columns), and the legend. Rates are computed against
// prev when there is one (and the scanner's plugin is the same process
// and did not restart its counters).
func printCompact(w io.Writer, prev, cur *sample) {
	d := cur.doc
	head := fmt.Sprintf("-- %s  ffscan %s  config generation %d", cur.at.Format("15:04:05"), d.Version, d.Config.Generation)
	if d.Config.Refused > 0 {
		head += fmt.Sprintf(" (%d refused)", d.Config.Refused)
	}
	if cs := d.Completions; cs != nil {
		head += fmt.Sprintf("  completions: %d msgs, %d edges", cs.Messages, cs.Resolved)
		if pg := d.Postgres; pg != nil && pg.Completions != nil {
			head += fmt.Sprintf(", pg %d", pg.Completions.Dispatched)
		}
	}
	fmt.Fprintln(w, head)
	fmt.Fprintf(w, "%-22s %-10s %7s %9s %10s %6s %8s %10s\n", "SCANNER", "STATE", "CYCLES", "ITEMS/S", "ITEMS", "ERRS", "BACKLOG", "LAST")
	before := map[string]httpapi.ScannerStatus{}
	var elapsed time.Duration
	if prev != nil {
		elapsed = cur.at.Sub(prev.at)
		for _, s := range prev.doc.Scanners {
			before[s.Name] = s
		}
	}
	for _, s := range d.Scanners {
		rate := "-"
		if p, ok := before[s.Name]; ok && s.Enabled && elapsed > 0 && s.Processed >= p.Processed {
			rate = fmt.Sprintf("%.1f", float64(s.Processed-p.Processed)/elapsed.Seconds())
		}
		backlog := "-"
		if s.Backlog != nil {
			backlog = fmt.Sprint(*s.Backlog)
		}
		last := "-"
		if s.LastCycleDuration != "" {
			if dur, err := time.ParseDuration(s.LastCycleDuration); err == nil {
				last = dur.Round(100 * time.Microsecond).String()
			}
		}
		state := s.State
		if !s.Enabled {
			state = "disabled"
		}
		fmt.Fprintf(w, "%-22s %-10s %7d %9s %10d %6d %8s %10s\n", clip(s.Name, 22), clip(state, 10), s.Cycle, rate, s.Processed, s.Errors, backlog, last)
		if s.NotApplied != "" {
			fmt.Fprintf(w, "  %s\n", clip("NOT APPLIED: "+oneLine(s.NotApplied), 98))
		}
	}
	fmt.Fprintln(w, watchLegend)
}

// clip shortens s to n columns, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(s[:n-1]) + "~"
}
