package main

// ffscan scan-once: one cycle of one scanner, printed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/scheduler"
)

func cmdScanOnce(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("scan-once", stderr)
	name := fs.String("scanner", "", "scanner name (required)")
	partition := fs.Int("partition", -1, "scan only this partition index (default: all)")
	dryRun := fs.Bool("dry-run", false, "ask the scanner to decide without mutating; writes are refused")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		return usageError{errors.New("--scanner is required")}
	}
	if *partition < -1 || *partition > 65535 {
		return usageError{fmt.Errorf("--partition %d is out of range", *partition)}
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	// On a host without Valkey, FlowFabric's name of a Postgres
	// reconciler names ffscan's scanner for it.
	*name = cfg.ScannerName(*name)
	log := quietLogger(cfg, c)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	boot := host.Boot
	if *dryRun {
		// A dry run leaves the keyspace as it found it: no partition
		// record, no lane merge, no library load.
		boot = host.BootReadOnly
	}
	h, err := boot(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer h.Close()
	sum, err := h.ScanOnce(ctx, *name, *partition, *dryRun)
	if err == nil && sum.Failed > 0 {
		err = fmt.Errorf("%d partition(s) failed", sum.Failed)
	}
	if err == nil {
		printSummary(stdout, *name, *dryRun, sum)
		return nil
	}
	// The error comes first; a summary follows only when the cycle got
	// somewhere, marked as the partial result it is.
	fmt.Fprintf(stderr, "ffscan scan-once: %v\n", err)
	if sum.Partitions > 0 {
		fmt.Fprintln(stderr, "what the cycle did before it failed:")
		printSummary(stderr, *name, *dryRun, sum)
	}
	return reported{err}
}

func printSummary(w io.Writer, name string, dryRun bool, s scheduler.Summary) {
	mode := ""
	if dryRun {
		mode = " (dry run)"
	}
	fmt.Fprintf(w, "scanner %s%s\n", name, mode)
	fmt.Fprintf(w, "partitions: %d visited, %d scanned, %d skipped (empty), %d failed, %d follow-up rescans\n",
		s.Partitions, s.Scanned, s.Empty, s.Failed, s.FollowUps)
	fmt.Fprintf(w, "items:      %d processed, %d skipped\n", s.Processed, s.Skipped)
	if len(s.Errors) == 0 {
		fmt.Fprintln(w, "errors:     none")
	} else {
		var parts []string
		for k, n := range s.Errors {
			code := k.Code
			if code == "" {
				code = "-"
			}
			parts = append(parts, fmt.Sprintf("%s/%s=%d", k.Class, code, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "errors:     %s\n", strings.Join(parts, " "))
	}
	if s.BacklogKnown {
		fmt.Fprintf(w, "backlog:    %d\n", s.Backlog)
	}
	if s.Lag > 0 {
		fmt.Fprintf(w, "oldest due: %s ago\n", s.Lag.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "duration:   %s\n", s.Duration.Round(time.Microsecond))
	for _, n := range s.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}
