package main

// ffscan plugins install | upgrade | lock | publish | keygen: plugin
// distribution (host/distribution does the work).

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/distribution"
	"github.com/ffscan/ffscan/host/plugindir"
)

const registryConfigUsage = "a Docker-style config.json with the registry's credentials (default: $DOCKER_CONFIG/config.json or ~/.docker/config.json, when present)"

// installFlags are the flags install, upgrade and lock share.
type installFlags struct {
	dryRun, allowDowngrade, plainHTTP *bool
	authFile                          *string
}

func addInstallFlags(fs *flag.FlagSet, dry bool) installFlags {
	f := installFlags{
		allowDowngrade: fs.Bool("allow-downgrade", false, "install an artifact older than the locked one"),
		plainHTTP:      fs.Bool("plain-http", false, "speak HTTP to a registry that is not on loopback (loopback always is)"),
		authFile:       fs.String("registry-config", "", registryConfigUsage),
	}
	if dry {
		f.dryRun = fs.Bool("dry-run", false, "verify and check everything, print what would change, change nothing")
	} else {
		f.dryRun = new(bool)
	}
	return f
}

func (f installFlags) options(cfg *config.Config) (distribution.Options, error) {
	o, err := distribution.OptionsFromConfig(cfg)
	if err != nil {
		return o, err
	}
	o.DryRun, o.AllowDowngrade = *f.dryRun, *f.allowDowngrade
	o.Access = distribution.Access{PlainHTTP: *f.plainHTTP, AuthFile: *f.authFile}
	return o, nil
}

func cmdPluginsInstall(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins install", stderr)
	f := addInstallFlags(fs, true)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	o, err := f.options(cfg)
	if err != nil {
		return err
	}
	res, err := distribution.Install(context.Background(), pos[0], o)
	if err != nil {
		return fmt.Errorf("not installed: %w", err)
	}
	reportInstall(stdout, cfg, res)
	recordInstall(cfg, "install", res, stderr)
	return nil
}

// recordInstall writes an install or upgrade that placed a binary to the
// audit trail (the hot swap it causes is the host's own entry).
func recordInstall(cfg *config.Config, action string, res distribution.Result, stderr io.Writer) {
	if res.DryRun || res.Unchanged {
		return
	}
	l := res.Locked
	detail := fmt.Sprintf("%s (%s, version %s) signed by %s: placed sha256 %.12s", l.Reference, l.Digest, shownVersion(l.Version), l.Signer,
		l.Platforms[distribution.Platform()].SHA256)
	for _, s := range l.Scanners {
		recordAction(cfg, action, s, detail, stderr)
	}
}

func cmdPluginsUpgrade(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins upgrade", stderr)
	f := addInstallFlags(fs, true)
	to := fs.String("to", "", "the tag or digest to upgrade to (default: the tag it was installed from, resolved again)")
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	o, err := f.options(cfg)
	if err != nil {
		return err
	}
	lock, err := distribution.ReadLock(o.LockFile)
	if err != nil {
		return err
	}
	name, lp, err := lockedPlugin(lock, pos[0])
	if err != nil {
		return err
	}
	r, err := distribution.ParseRef(lp.Reference)
	if err != nil {
		return err
	}
	switch {
	case *to != "":
		r = r.WithReference(*to)
	case r.Tag == "":
		return usageError{fmt.Errorf("%s was installed by digest (%s): name the tag or digest to upgrade to with --to", name, lp.Reference)}
	}
	o.Plugin = name
	res, err := distribution.Install(context.Background(), r.Raw, o)
	if err != nil {
		return fmt.Errorf("not upgraded: %w", err)
	}
	reportInstall(stdout, cfg, res)
	recordInstall(cfg, "upgrade", res, stderr)
	return nil
}

// lockedPlugin finds a lock entry by plugin or scanner name.
func lockedPlugin(lock *distribution.Lock, name string) (string, distribution.LockedPlugin, error) {
	if lp, ok := lock.Plugins[name]; ok {
		return name, lp, nil
	}
	for p, lp := range lock.Plugins {
		if slices.Contains(lp.Scanners, name) {
			return p, lp, nil
		}
	}
	return "", distribution.LockedPlugin{}, fmt.Errorf("%s is neither a plugin nor a scanner in the plugin lock (install it first)", name)
}

func cmdPluginsLock(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins lock", stderr)
	f := addInstallFlags(fs, false)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	cfg, err := c.load(fs)
	if err != nil {
		return err
	}
	o, err := f.options(cfg)
	if err != nil {
		return err
	}
	res, err := distribution.LockOnly(context.Background(), pos[0], o)
	if err != nil {
		return fmt.Errorf("not locked: %w", err)
	}
	fmt.Fprintf(stdout, "locked %s: %s (version %s, signed by %s) in %s\n", res.Plugin, res.Locked.Digest, shownVersion(res.Locked.Version), res.Locked.Signer, o.LockFile)
	for _, p := range slices.Sorted(maps.Keys(res.Locked.Platforms)) {
		fmt.Fprintf(stdout, "  %s sha256 %s\n", p, res.Locked.Platforms[p].SHA256)
	}
	fmt.Fprintf(stdout, "nothing placed in %s: `ffscan plugins install %s` installs it\n", cfg.PluginDir, pos[0])
	return nil
}

func reportInstall(w io.Writer, cfg *config.Config, res distribution.Result) {
	l := res.Locked
	plat := distribution.Platform()
	if l.Signer.Fingerprint != "" {
		fmt.Fprintf(w, "verified %s: signed by %s (%s, %s)\n", l.Digest, l.Signer, l.Signer.Fingerprint, l.Signer.Via)
	} else {
		fmt.Fprintf(w, "verified %s: signed by %s (keyless, %s)\n", l.Digest, l.Signer, l.Signer.Via)
	}
	fmt.Fprintf(w, "plugin %s version %s: scanners %s\n", res.Plugin, shownVersion(l.Version), strings.Join(l.Scanners, ", "))
	for _, s := range res.Declared.Scanners {
		fmt.Fprintf(w, "  scanner %s: scanner API %d..%d, declared policy %s\n", s.Name, s.APIMin, s.APIMax, s.Policy.Digest())
		for _, line := range s.Policy.Lines() {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
	if res.Previous != nil {
		fmt.Fprintf(w, "replaces %s (version %s)\n", res.Previous.Digest, shownVersion(res.Previous.Version))
	}
	sha := l.Platforms[plat].SHA256
	switch {
	case res.Unchanged:
		fmt.Fprintf(w, "unchanged: %s already holds %s (sha256 %s)\n", res.Path, l.Digest, sha)
		return
	case res.DryRun:
		fmt.Fprintf(w, "dry run: would lock it in %s and place %s (sha256 %s); nothing changed\n", cfg.LockFile(), res.Path, sha)
		return
	}
	fmt.Fprintf(w, "locked in %s; placed %s (sha256 %s)\n", cfg.LockFile(), res.Path, sha)
	for _, s := range l.Scanners {
		if sc, ok := cfg.Scanners[s]; ok && sc.SHA256 != "" && sc.SHA256 != sha {
			fmt.Fprintf(w, "scanner %s is pinned to sha256 %s: the host keeps the running binary until the pin is updated (ffscan plugins pin %s --write)\n", s, sc.SHA256, s)
		}
	}
	fmt.Fprintln(w, "a running host watching plugin_dir hot-swaps it; a policy wider than the approved one waits for `ffscan plugins approve`")
}

func shownVersion(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// binaryFlags collects --binary GOOS/GOARCH=PATH.
type binaryFlags map[string]string

func (b binaryFlags) String() string { return "" }
func (b binaryFlags) Set(v string) error {
	plat, path, ok := strings.Cut(v, "=")
	if !ok || strings.Count(plat, "/") < 1 || path == "" {
		return errors.New("want GOOS/GOARCH=PATH")
	}
	b[plat] = path
	return nil
}

func cmdPluginsPublish(args []string, stdout, stderr io.Writer) error {
	fs, c := newFlags("plugins publish", stderr)
	bins := binaryFlags{}
	fs.Var(bins, "binary", "GOOS/GOARCH=PATH of one platform's binary (repeat for each platform)")
	keyFile := fs.String("key", "", "the publisher's PEM ECDSA P-256 private key (ffscan plugins keygen)")
	version := fs.String("version", "", "the plugin's version (semver)")
	name := fs.String("name", "", "the binary's file name in plugin_dir (default: this platform's binary's name)")
	declaredFile := fs.String("declared", "", "the declared manifest (JSON); default: read from this platform's binary by launching it")
	plainHTTP := fs.Bool("plain-http", false, "speak HTTP to a registry that is not on loopback")
	authFile := fs.String("registry-config", "", registryConfigUsage)
	pos, err := parseArgs(fs, args, 1)
	if err != nil {
		return err
	}
	if len(bins) == 0 || *keyFile == "" {
		return usageError{errors.New("--binary (at least one) and --key are required")}
	}
	key, err := distribution.LoadPrivateKey(*keyFile)
	if err != nil {
		return err
	}
	var d distribution.Declared
	if *declaredFile != "" {
		b, err := os.ReadFile(*declaredFile)
		if err != nil {
			return err
		}
		if d, err = distribution.ParseDeclared(b); err != nil {
			return err
		}
	} else {
		path, ok := bins[distribution.Platform()]
		if !ok {
			return usageError{fmt.Errorf("no --binary for this platform (%s) to read the declaration from: give one, or --declared", distribution.Platform())}
		}
		cfg, err := c.load(fs)
		if err != nil {
			return err
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		pi := plugindir.InspectFile(context.Background(), cfg, abs, quietLogger(cfg, c))
		if pi.Err != nil {
			return fmt.Errorf("read the declaration of %s: %w", path, pi.Err)
		}
		plugin := *name
		if plugin == "" {
			plugin = filepath.Base(path)
		}
		d = distribution.DeclaredFromInfo(plugin, *version, pi.Scanners)
	}
	if *name != "" {
		d.Plugin = *name
	}
	if *version != "" {
		d.Version = *version
	}
	desc, err := distribution.Publish(context.Background(), pos[0], distribution.PublishOptions{
		Binaries: bins, Declared: d, Key: key, Access: distribution.Access{PlainHTTP: *plainHTTP, AuthFile: *authFile},
	})
	if err != nil {
		return fmt.Errorf("not published: %w", err)
	}
	fmt.Fprintf(stdout, "published %s as %s: plugin %s version %s, scanners %s, platforms %s\n", pos[0], desc.Digest, d.Plugin, shownVersion(d.Version),
		strings.Join(d.ScannerNames(), ", "), strings.Join(slices.Sorted(maps.Keys(bins)), ", "))
	fmt.Fprintf(stdout, "signed by %s (a Sigstore bundle referrer and a cosign .sig tag)\n", distribution.Fingerprint(&key.PublicKey))
	return nil
}

func cmdPluginsKeygen(args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlags("plugins keygen", stderr)
	out := fs.String("out", "", "write PREFIX.key (private, 0600) and PREFIX.pub")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usageError{errors.New("--out PREFIX is required")}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	priv, err := distribution.MarshalPrivateKey(k)
	if err != nil {
		return err
	}
	pub, err := distribution.MarshalPublicKey(&k.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out+".key", priv, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(*out+".pub", pub, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s.key and %s.pub (%s)\n", *out, *out, distribution.Fingerprint(&k.PublicKey))
	return nil
}

// verifyLock is `plugins verify`'s check of the plugin lock, offline:
// each locked plugin's signature chain and the binary in plugin_dir.
// It returns how many failed.
func verifyLock(w io.Writer, cfg *config.Config) (int, error) {
	path := cfg.LockFile()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if cfg.PluginSignature == config.SignatureRequired {
			fmt.Fprintf(w, "FAIL plugin lock %s: missing, and plugin_signature is required\n", path)
			return 1, nil
		}
		return 0, nil
	}
	lock, err := distribution.ReadLock(path)
	if err != nil {
		return 0, err
	}
	o, err := distribution.OptionsFromConfig(cfg)
	if err != nil {
		return 0, err
	}
	failed := 0
	for _, name := range slices.Sorted(maps.Keys(lock.Plugins)) {
		lp := lock.Plugins[name]
		signer, err := lp.VerifyOffline(o.Trust(), time.Now())
		if err == nil {
			var sum string
			sum, err = fileSHA256(filepath.Join(cfg.PluginDir, name))
			if errors.Is(err, os.ErrNotExist) {
				err = fmt.Errorf("locked but not installed (ffscan plugins install %s)", lp.Reference)
			} else if err == nil {
				err = lock.CheckBinary(name, sum)
			}
		}
		if err != nil {
			failed++
			fmt.Fprintf(w, "FAIL locked plugin %s (%s): %v\n", name, lp.Reference, err)
			continue
		}
		fmt.Fprintf(w, "ok   locked plugin %s: %s, version %s, signed by %s (%s), binary as locked\n", name, lp.Digest, shownVersion(lp.Version), signer, signer.Via)
	}
	return failed, nil
}

// checkLockedPolicies fails each verified scanner of a locked plugin whose
// binary declares another policy than its signed declaration (the lock's
// policy digest): the publisher signed a declaration the binary does not
// keep.
func checkLockedPolicies(cfg *config.Config, res []plugindir.VerifyResult) {
	lock, err := distribution.ReadLock(cfg.LockFile())
	if err != nil {
		return // verifyLock reports it
	}
	for i, r := range res {
		lp, ok := lock.Plugins[r.Binary]
		if !ok || r.Err != nil || r.Scanner == "" || r.Digest == "" {
			continue
		}
		if want, ok := lp.Policies[r.Scanner]; !ok {
			res[i].Err = fmt.Errorf("the signed declaration of %s (%s) has no scanner %s", r.Binary, lp.Reference, r.Scanner)
		} else if want != r.Digest {
			res[i].Err = fmt.Errorf("the binary declares policy %s, its signed declaration (%s) policy %s", r.Digest, lp.Reference, want)
		}
	}
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return distribution.SHA256Hex(b), nil
}
