package main

// ffscan plugins canary: a scanner's new binary in shadow beside the
// running one, compared decision by decision, then promoted or aborted.

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/httpapi"
)

func cmdPluginsCanary(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins canary", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	promote := fs.Bool("promote", false, "swap the canary in (a hot swap to exactly the bytes it was compared as)")
	abort := fs.Bool("abort", false, "stop the canary; the running version is untouched")
	status := fs.Bool("status", false, "show the canary and its latest differences")
	tokenFile := fs.String("token-file", "", tokenFileUsage)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	n := 0
	for _, b := range []bool{*promote, *abort, *status} {
		if b {
			n++
		}
	}
	if n > 1 {
		return usageError{errors.New("--promote, --abort and --status exclude one another")}
	}
	if *status {
		a, err := hostAddr(fs, c, *addr)
		if err != nil {
			return err
		}
		doc, err := (httpapi.Client{Addr: a}).Status(10 * time.Second)
		if err != nil {
			return err
		}
		for _, s := range doc.Scanners {
			if s.Name == name {
				if s.Canary == nil {
					return fmt.Errorf("scanner %s has had no canary since the host started", name)
				}
				printCanary(stdout, name, *s.Canary, 20)
				return nil
			}
		}
		return fmt.Errorf("no scanner %s in the host's status", name)
	}
	cl, err := adminClient(fs, c, *addr, *tokenFile)
	if err != nil {
		return err
	}
	path := "/v1/scanners/" + name + "/canary"
	switch {
	case *promote:
		path += "/promote"
	case *abort:
		path += "/abort"
	}
	var res httpapi.CanaryResult
	if _, err := cl.Post(path, 3*time.Minute, &res); err != nil {
		return err
	}
	if res.Canary != nil {
		printCanary(stdout, name, *res.Canary, 10)
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}

// printCanary shows a canary: its versions, state, counts and latest
// differences.
func printCanary(w io.Writer, name string, cs canary.Status, n int) {
	fmt.Fprintf(w, "scanner %s: canary %s\n", name, cs.State)
	fmt.Fprintf(w, "  running: sha256 %s version %s\n", short(cs.From.SHA256), oneLine(cs.From.Version))
	fmt.Fprintf(w, "  canary:  sha256 %s version %s\n", short(cs.To.SHA256), oneLine(cs.To.Version))
	fmt.Fprintf(w, "  cycles compared %d: %d in a row without a difference, %d with one, %d not compared in full\n", cs.Cycles, cs.Clean, cs.WithDifference, cs.Unsure)
	fmt.Fprintf(w, "  items: %d same, %d only the canary would act on, %d only the running version acts on, %d differ\n",
		cs.Items["same"], cs.Items[canary.OnlyNew], cs.Items[canary.OnlyOld], cs.Items[canary.Differ])
	if cs.PromoteAfter > 0 {
		fmt.Fprintf(w, "  promoted on its own after %d clean cycles in a row, unless a cycle differs\n", cs.PromoteAfter)
	}
	if cs.Reason != "" {
		fmt.Fprintf(w, "  %s\n", oneLine(cs.Reason))
	}
	for i, d := range cs.Latest {
		if i == n {
			fmt.Fprintf(w, "  … %d more differences\n", len(cs.Latest)-n)
			break
		}
		fmt.Fprintf(w, "  %-8s cycle %d (x%d) %s\n", d.Kind, d.Cycle, d.Seen, oneLine(d.Item))
		if len(d.Old) > 0 {
			fmt.Fprintf(w, "           running: %s\n", oneLine(strings.Join(d.Old, "; ")))
		}
		if len(d.New) > 0 {
			fmt.Fprintf(w, "           canary:  %s\n", oneLine(strings.Join(d.New, "; ")))
		}
	}
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// cmdScannersResume resumes a scanner paused at its action budget.
func cmdScannersResume(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("scanners resume", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	tokenFile := fs.String("token-file", "", tokenFileUsage)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	cl, err := adminClient(fs, c, *addr, *tokenFile)
	if err != nil {
		return err
	}
	var res httpapi.ResumeResult
	if _, err := cl.Post("/v1/scanners/"+pos[0]+"/resume", time.Minute, &res); err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	if !res.Resumed {
		fmt.Fprintf(stdout, "scanner %s was not paused\n", pos[0])
		return nil
	}
	fmt.Fprintf(stdout, "scanner %s resumed: it acts again from its next cycle (it had paused: %s)\n", pos[0], oneLine(res.Pause.Reason))
	return nil
}

// cmdScannersSwitch switches a scanner of a running host: to shadow or
// act mode, or enabled or disabled; until the host restarts (its
// configuration makes it last).
func cmdScannersSwitch(what string, args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("scanners "+what, stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	tokenFile := fs.String("token-file", "", tokenFileUsage)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	cl, err := adminClient(fs, c, *addr, *tokenFile)
	if err != nil {
		return err
	}
	var res httpapi.ReloadResult
	if _, err := cl.Post("/v1/scanners/"+pos[0]+"/"+what, 3*time.Minute, &res); err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	for _, n := range res.Notes {
		fmt.Fprintln(stdout, n)
	}
	switch what {
	case "enable", "disable":
		fmt.Fprintf(stdout, "scanner %s: %sd (until the host restarts; scanners.%s.enabled makes it last)\n", pos[0], what, pos[0])
	default:
		fmt.Fprintf(stdout, "scanner %s: mode %s (until the host restarts; scanners.%s.mode makes it last)\n", pos[0], what, pos[0])
	}
	return nil
}
