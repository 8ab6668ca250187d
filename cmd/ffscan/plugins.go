package main

// ffscan plugins list | verify | approve | reload | pin.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/plugindir"
)

func cmdPluginsList(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins list", stderr)
	verbose := fs.Bool("verbose", false, "also show each scanner's sources, declared commands and functions, and options")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	infos, err := plugindir.List(context.Background(), cfg, quietLogger(cfg, c))
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BINARY\tSCANNER\tVERSION\tAPI\tFAMILY\tSHA256")
	failed := 0
	for _, pi := range infos {
		if pi.Err != nil {
			failed++
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tERROR: %v\n", pi.Binary, pi.Err)
			continue
		}
		for _, in := range pi.Scanners {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", pi.Binary, in.Name, plugindir.Shown(in.Version), in.APIVersion, in.Family, pi.SHA256)
		}
	}
	_ = tw.Flush()
	if *verbose {
		for _, pi := range infos {
			for _, in := range pi.Scanners {
				fmt.Fprintf(stdout, "\n%s (%s): every %s, batch %d\n", in.Name, pi.Binary, in.DefaultInterval, in.DefaultBatch)
				for _, src := range in.Sources {
					fmt.Fprintf(stdout, "  source %s: %s %s", plugindir.Shown(src.Name), plugindir.Shown(string(src.Kind)), plugindir.Shown(src.Key))
					if src.Backlog != "" {
						fmt.Fprintf(stdout, " (backlog: %s)", plugindir.Shown(string(src.Backlog)))
					}
					fmt.Fprintln(stdout)
				}
				fmt.Fprintf(stdout, "  commands: %s\n", plugindir.Shown(orNone(in.Commands)))
				for _, ks := range in.KeyScopes {
					fmt.Fprintf(stdout, "  key scope of %s: %s\n", plugindir.Shown(ks.Command), plugindir.Shown(strings.Join(ks.Patterns, " ")))
				}
				fmt.Fprintf(stdout, "  functions: %s\n", plugindir.Shown(orNone(in.Functions)))
				for _, o := range in.Options {
					fmt.Fprintf(stdout, "  option %s (%s, default %q): %s\n", plugindir.Shown(o.Name), plugindir.Shown(string(o.Type)), plugindir.Shown(o.Default), plugindir.Shown(o.Description))
				}
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d plugin(s) could not be read", failed)
	}
	return nil
}

func cmdPluginsVerify(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins verify", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	res, err := plugindir.Verify(context.Background(), cfg, quietLogger(cfg, c))
	checkLockedPolicies(cfg, res)
	failed, lerr := verifyLock(stdout, cfg)
	err = errors.Join(err, lerr)
	for _, r := range res {
		who := "scanner " + r.Scanner + " (" + r.Binary + ")"
		if r.Binary == "" {
			who = "scanner " + r.Scanner
		}
		if r.Scanner == "" {
			who = "binary " + r.Binary + " (not configured)"
		}
		if r.Err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL %s: %v\n", who, r.Err)
			printPolicy(stdout, r.Policy, r.Approval)
			printDigest(stdout, r)
			continue
		}
		fmt.Fprintf(stdout, "ok   %s sha256 %s\n", who, r.SHA256)
		if r.Isolation != "" {
			fmt.Fprintf(stdout, "     isolation: %s\n", r.Isolation)
		}
		if r.Bounds != "" {
			fmt.Fprintf(stdout, "     bounds: %s\n", r.Bounds)
		}
		printPolicy(stdout, r.Policy, r.Approval)
		printDigest(stdout, r)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d check(s) failed verification", failed)
	}
	return nil
}

func describeSwap(p httpapi.PluginSwapResult) string {
	sha := func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	}
	switch p.Outcome {
	case "swapped", "kept":
		return fmt.Sprintf("%s: now version %s, sha256 %s (was %s, %s), pid %d", p.Outcome, p.ToVersion, sha(p.ToSHA256), p.FromVersion, sha(p.FromSHA256), p.Pid)
	case "rolled_back":
		return fmt.Sprintf("rolled back to version %s, sha256 %s, pid %d: %s", p.ToVersion, sha(p.ToSHA256), p.Pid, p.Error)
	case "unchanged":
		return fmt.Sprintf("unchanged: the file is what runs (sha256 %s); --force swaps anyway", sha(p.FromSHA256))
	case "reconfigured":
		return "options applied in place"
	case "started":
		return "was not running; launching it now"
	}
	return fmt.Sprintf("%s: %s", p.Outcome, p.Error)
}

func cmdPluginsReload(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins reload", stderr)
	addr := fs.String("addr", "", "host:port of the running host's HTTP listener (default: http.listen)")
	force := fs.Bool("force", false, "swap even if the file is what runs, or was tried and rejected before")
	noWait := fs.Bool("no-wait", false, "return at the switch instead of after the probation")
	tokenFile := fs.String("token-file", "", tokenFileUsage)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	cl, err := adminClient(fs, c, *addr, *tokenFile)
	if err != nil {
		return err
	}
	q := "?force=0"
	if *force {
		q = "?force=1"
	}
	if *noWait {
		q += "&wait=0"
	}
	var res httpapi.PluginSwapResult
	if _, err := cl.Post("/v1/scanners/"+pos[0]+"/reload"+q, 3*time.Minute, &res); err != nil {
		return err
	}
	if res.Outcome == "" && res.Error != "" {
		return errors.New(res.Error)
	}
	fmt.Fprintf(stdout, "scanner %s: %s\n", pos[0], describeSwap(res))
	switch res.Outcome {
	case "failed", "rolled_back":
		return fmt.Errorf("the previous plugin keeps serving")
	}
	return nil
}

func cmdPluginsPin(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins pin", stderr)
	write := fs.Bool("write", false, "write the pin into the --config file instead of printing it")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if *write && c.configFile == "" {
		return usageError{errors.New("--write needs --config (or $FFSCAN_CONFIG)")}
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	pi, err := plugindir.Pin(context.Background(), cfg, name, quietLogger(cfg, c))
	if err != nil {
		return fmt.Errorf("not pinning %s: %w", name, err)
	}
	if !*write {
		fmt.Fprintf(stdout, "# %s: %s, version %s, scanner API %d\n", name, pi.Path, pi.Version, pi.APIVersion)
		fmt.Fprintf(stdout, "scanners:\n  %s:\n    sha256: \"%s\"\n", name, pi.SHA256)
		return nil
	}
	if err := config.WritePin(c.configFile, name, pi.SHA256); err != nil {
		return err
	}
	recordAction(cfg, "pin", name, fmt.Sprintf("scanners.%s.sha256 pinned to %.12s in %s", name, pi.SHA256, c.configFile), stderr)
	fmt.Fprintf(stdout, "pinned scanners.%s.sha256 to %s in %s (version %s); a running host picks it up on reload\n", name, pi.SHA256, c.configFile, pi.Version)
	return nil
}

// printPolicy shows what a scanner may run, for the operator's review.
func printPolicy(w io.Writer, lines []string, approval string) {
	if len(lines) == 0 && approval == "" {
		return
	}
	if approval != "" {
		fmt.Fprintf(w, "     policy: %s\n", approval)
	} else {
		fmt.Fprintln(w, "     policy:")
	}
	for _, l := range lines {
		fmt.Fprintf(w, "       %s\n", l)
	}
}

// printDigest names the declared policy and how to approve exactly it.
func printDigest(w io.Writer, r plugindir.VerifyResult) {
	if r.Digest == "" {
		return
	}
	fmt.Fprintf(w, "     declared policy %s\n", r.Digest)
	if r.SHA256 != "" && !strings.HasPrefix(r.Approval, "approved") {
		fmt.Fprintf(w, "     to approve exactly this: ffscan plugins approve %s --sha256 %s --policy %s\n", r.Scanner, r.SHA256, r.Digest)
	}
}

func cmdPluginsApprove(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins approve", stderr)
	all := fs.Bool("all", false, "approve every enabled scanner's policy")
	sha := fs.String("sha256", "", "approve only if the scanner's binary has this sha256 (as `plugins verify` showed it)")
	digest := fs.String("policy", "", "approve only if the binary declares the policy of this digest (as `plugins verify` showed it; 12 characters or more)")
	names, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if *all == (len(names) > 0) {
		return usageError{errors.New("name the scanners to approve, or pass --all")}
	}
	rv := plugindir.Reviewed{SHA256: *sha, Policy: *digest}
	if rv != (plugindir.Reviewed{}) && len(names) != 1 {
		return usageError{errors.New("--sha256 and --policy name one scanner's binary: approve one scanner at a time")}
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	res, err := plugindir.Approve(context.Background(), cfg, names, rv, quietLogger(cfg, c))
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range res {
		if r.Err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL scanner %s: %v\n", r.Scanner, r.Err)
			recordAction(cfg, "approve", r.Scanner, "not approved: "+r.Err.Error(), stderr)
			continue
		}
		fmt.Fprintf(stdout, "approved scanner %s (%s, sha256 %s): policy %s\n", r.Scanner, r.Binary, r.SHA256, r.Digest)
		recordAction(cfg, "approve", r.Scanner, fmt.Sprintf("binary sha256 %.12s, policy %.12s: approved", r.SHA256, r.Digest), stderr)
		for _, l := range r.Policy {
			fmt.Fprintf(stdout, "       %s\n", l)
		}
		if len(r.Added) > 0 {
			fmt.Fprintf(stdout, "     new in this approval: %s\n", strings.Join(r.Added, "; "))
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d not approved", failed, len(res))
	}
	fmt.Fprintln(stdout, "a running host uses the approval at its next launch of the plugin (ffscan plugins reload NAME --force)")
	return nil
}
