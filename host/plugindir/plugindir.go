package plugindir

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host/boot"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/internal/plaintext"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// session is one operator command's look at the plugin directory.
type session struct {
	cfg   *config.Config
	cat   *catalog.Catalog
	res   Resolver
	probe Probe
	log   hclog.Logger
	// infos, when set, keeps what each binary declared for the scanners
	// after the first that use it unpinned (Verify).
	infos map[string]PluginInfo
}

func open(cfg *config.Config, log hclog.Logger) (*session, error) {
	cat, err := catalog.New(cfg.PluginDir)
	if err != nil {
		return nil, err
	}
	return &session{cfg: cfg, cat: cat, probe: ProbeOf(cfg), log: log}, nil
}

func (s *session) close() { _ = s.cat.Close() }

// binaries lists the directory's binaries; none is an error.
func (s *session) binaries() ([]string, error) {
	names, err := s.cat.List()
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w in plugin_dir %s (`make build` puts ffscan's own in bin/plugins, the default for bin/ffscan)", ErrNoPlugins, s.cat.Dir())
	}
	return names, nil
}

// check takes scanner name through what its launch checks: the binary
// that serves it (configured, or found by what the plugins declare),
// staged (its pin checked when pinned), launched to read its Info, and
// that Info checked for the scanner (served, usable, its commands
// allowed, the configured options accepted). An unconfigured scanner is
// checked as enabled with the defaults. err is the resolution's failure
// (sc names the binary otherwise); a later step's is pi.Err. entry is
// zero when the binary was not staged.
func (s *session) check(ctx context.Context, name string, pinned bool) (sc config.Scanner, entry catalog.Entry, pi PluginInfo, err error) {
	sc, ok := s.cfg.Scanners[name]
	if !ok {
		sc = config.Scanner{Enabled: true}
	}
	bin, err := s.res.PluginFor(ctx, s.cat, name, sc, s.probe, s.log)
	if err != nil {
		return sc, entry, pi, err
	}
	sc.Plugin = bin
	pin := ""
	if pinned {
		pin = sc.SHA256
	}
	if cached, ok := s.infos[bin]; ok && pin == "" {
		pi = cached
	} else {
		if entry, err = s.cat.Stage(bin, pin); err != nil {
			entry, pi = catalog.Entry{}, PluginInfo{Binary: bin, Err: err}
		} else {
			pi = inspectEntry(ctx, bin, entry, s.probe, s.log)
		}
		if s.infos != nil {
			s.infos[bin] = pi
		}
	}
	if pi.Err == nil {
		pi.Err = checkScanner(name, sc, pi)
	}
	return sc, entry, pi, nil
}

// List launches every binary in the plugin directory long enough to read
// its scanners' Info. Pins configured for a binary are checked.
func List(ctx context.Context, cfg *config.Config, log hclog.Logger) ([]PluginInfo, error) {
	s, err := open(cfg, log)
	if err != nil {
		return nil, err
	}
	defer s.close()
	names, err := s.binaries()
	if err != nil {
		return nil, err
	}
	pins := pinsByBinary(cfg)
	var out []PluginInfo
	for _, name := range names {
		out = append(out, inspect(ctx, s.cat, name, pins[name], s.probe, log))
	}
	return out, nil
}

func pinsByBinary(cfg *config.Config) map[string]string {
	pins := map[string]string{}
	for _, sc := range cfg.Scanners {
		if sc.SHA256 != "" && sc.Plugin != "" {
			pins[sc.Plugin] = sc.SHA256
		}
	}
	return pins
}

// VerifyResult is the verdict on one configured scanner or unconfigured
// binary.
type VerifyResult struct {
	Scanner   string // empty for a binary no scanner uses
	Binary    string
	SHA256    string
	Isolation string // what confined the verifying launch
	// Bounds are the kernel's bounds a launch of the scanner gets (its
	// control group's, or rlimits and why).
	Bounds string
	// Policy is what the scanner declares (policy.Policy.Lines), Digest
	// names it (what `ffscan plugins approve --policy` takes), and
	// Approval says how it stands against the recorded approval.
	Policy   []string
	Digest   string
	Approval string
	Err      error
}

// Verify checks every configured scanner: the binary passes the catalog
// checks (permissions, no symlink, sha256 pin), completes the handshake,
// serves the named scanner with a usable Info, and accepts the configured
// options by schema. Binaries in the directory that no scanner uses get
// the catalog checks and the handshake too.
func Verify(ctx context.Context, cfg *config.Config, log hclog.Logger) ([]VerifyResult, error) {
	s, err := open(cfg, log)
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.infos = map[string]PluginInfo{}
	used := map[string]bool{}
	var out []VerifyResult
	bounds, err := boot.OpenPluginBounds(cfg)
	if err != nil {
		return nil, err
	}
	defer bounds.Close()
	for _, n := range slices.Sorted(maps.Keys(cfg.Scanners)) {
		sc, _, pi, err := s.check(ctx, n, true)
		if err != nil {
			out = append(out, VerifyResult{Scanner: n, Err: err})
			continue
		}
		used[sc.Plugin] = true
		r := VerifyResult{Scanner: n, Binary: sc.Plugin, SHA256: pi.SHA256, Isolation: pi.Isolation, Err: pi.Err,
			Bounds: bounds.Describe(cfg.PluginLimits(sc))}
		if r.Err == nil {
			r.Policy, r.Digest, r.Approval, r.Err = approvalOf(cfg, n, pi)
		}
		out = append(out, r)
	}
	all, err := s.binaries()
	if err != nil {
		return out, err
	}
	pins := pinsByBinary(cfg)
	for _, b := range all {
		if used[b] {
			continue
		}
		pi := inspect(ctx, s.cat, b, pins[b], s.probe, log)
		out = append(out, VerifyResult{Binary: b, SHA256: pi.SHA256, Isolation: pi.Isolation, Err: pi.Err})
	}
	return out, nil
}

// approvalOf says how scanner's declared policy stands against the
// recorded approval: an error when a launch would be refused for it.
func approvalOf(cfg *config.Config, scanner string, pi PluginInfo) ([]string, string, string, error) {
	info, _ := scannerInfo(pi, scanner)
	p := policy.FromInfo(info)
	lines, digest := p.Lines(), p.Digest()
	store, err := policy.NewStore(cfg.PluginApprovalsFile, policy.Mode(cfg.PluginApproval))
	if err != nil {
		return lines, digest, "", err
	}
	rec, ok, err := store.Lookup(scanner)
	switch {
	case err != nil:
		return lines, digest, "", err
	case !ok && store.Mode() == policy.Required:
		return lines, digest, "not approved", &policy.NotApprovedError{Scanner: scanner, Policy: p, Path: store.Path()}
	case !ok:
		return lines, digest, "not yet approved: its first launch approves it (plugin_approval: first_use)", nil
	}
	if added := policy.Widening(rec.Policy, p); len(added) > 0 {
		return lines, digest, "wider than approved (" + DescribeRecord(rec) + ")", &policy.WideningError{Scanner: scanner, Added: added, Approved: rec, Path: store.Path()}
	}
	return lines, digest, "approved (" + DescribeRecord(rec) + ")", nil
}

// Shown returns text a plugin wrote (its Info's version, descriptions,
// sources) as the CLI may print it: one bounded line.
func Shown(s string) string { return plaintext.Line(s, plaintext.Max) }

// DescribeRecord names an approval for people: its policy's digest, the
// binary it was given for, who gave it and when.
func DescribeRecord(rec policy.Record) string {
	what := "policy " + rec.Digest
	if rec.ApprovedSHA256 != "" {
		what += " of binary sha256 " + rec.ApprovedSHA256
	}
	return fmt.Sprintf("%s, by %s on %s", what, rec.ApprovedBy, rec.ApprovedAt.Format(time.DateOnly))
}

func scannerInfo(pi PluginInfo, name string) (scannerapi.Info, bool) {
	for _, info := range pi.Scanners {
		if info.Name == name {
			return info, true
		}
	}
	return scannerapi.Info{}, false
}

// ApproveResult is what `ffscan plugins approve` recorded for a scanner.
type ApproveResult struct {
	Scanner string
	Binary  string
	SHA256  string
	Policy  []string
	// Added is what the approval grants beyond the one it replaced
	// (everything, for a first approval).
	Added  []string
	Digest string
	Err    error
}

// Reviewed is what an operator reviewed before approving (`ffscan
// plugins verify`, the console): the binary's sha256 and its policy's
// digest (policy.Policy.Digest; a prefix of at least 12 characters
// will do). An approval is refused unless the binary and its
// declaration are still exactly these. Empty fields are not checked.
type Reviewed struct {
	SHA256 string
	Policy string
}

// check refuses a binary or declaration other than the reviewed one.
func (rv Reviewed) check(sha string, p policy.Policy) error {
	if rv.SHA256 != "" && !strings.EqualFold(rv.SHA256, sha) {
		return fmt.Errorf("the binary is other than the one reviewed: its sha256 is %s, not %s; review it again (`ffscan plugins verify`)", sha, rv.SHA256)
	}
	if rv.Policy != "" {
		d := p.Digest()
		if len(rv.Policy) < 12 || !strings.HasPrefix(d, strings.ToLower(rv.Policy)) {
			return fmt.Errorf("the binary declares a policy other than the one reviewed: policy %s, not %s; review it again (`ffscan plugins verify`)", d, rv.Policy)
		}
	}
	return nil
}

// Approve records, as approved by the operator, the policy each named
// scanner's binary declares (every enabled scanner when names is empty).
// The binary passes the same checks as a launch first, and its Info is
// read twice, from two launches of the same staged bytes: a binary whose
// declaration changes between reads is refused, and so is one that is not
// what the operator reviewed (rv).
func Approve(ctx context.Context, cfg *config.Config, names []string, rv Reviewed, log hclog.Logger) ([]ApproveResult, error) {
	store, err := policy.NewStore(cfg.PluginApprovalsFile, policy.Mode(cfg.PluginApproval))
	if err != nil {
		return nil, err
	}
	return ApproveIn(ctx, cfg, store, names, rv, log)
}

// ApproveIn is Approve, recording in store (the running host's).
func ApproveIn(ctx context.Context, cfg *config.Config, store *policy.Store, names []string, rv Reviewed, log hclog.Logger) ([]ApproveResult, error) {
	s, err := open(cfg, log)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if len(names) == 0 {
		for n, sc := range cfg.Scanners {
			if sc.Enabled {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		if len(names) == 0 {
			return nil, fmt.Errorf("no scanner is enabled in the configuration; name the scanners to approve")
		}
	}
	if (rv != Reviewed{}) && len(names) != 1 {
		return nil, fmt.Errorf("a reviewed sha256 or policy names one scanner's binary: approve one scanner at a time")
	}
	var out []ApproveResult
	for _, n := range names {
		out = append(out, s.approve(ctx, store, n, rv))
	}
	return out, nil
}

func (s *session) approve(ctx context.Context, store *policy.Store, n string, rv Reviewed) ApproveResult {
	r := ApproveResult{Scanner: n}
	sc, entry, pi, err := s.check(ctx, n, true)
	if err != nil {
		r.Err = err
		return r
	}
	r.Binary, r.SHA256 = sc.Plugin, entry.SHA256
	// One private copy of the bytes, read twice: what is approved is
	// what these bytes declare, every time they are asked.
	var pols [2]policy.Policy
	for i := range pols {
		if i > 0 {
			if pi = inspectEntry(ctx, sc.Plugin, entry, s.probe, s.log); pi.Err == nil {
				pi.Err = checkScanner(n, sc, pi)
			}
		}
		if r.Err = pi.Err; r.Err != nil {
			return r
		}
		info, _ := scannerInfo(pi, n)
		pols[i] = policy.FromInfo(info)
	}
	if a, b := pols[0], pols[1]; a.Digest() != b.Digest() {
		diff := append(policy.Widening(a, b), policy.Widening(b, a)...)
		r.Err = fmt.Errorf("binary %s (sha256 %s) declares a different policy each time it is read (%s, then %s: %s); refusing to approve a declaration that changes",
			sc.Plugin, entry.SHA256, a.Digest()[:12], b.Digest()[:12], strings.Join(diff, "; "))
		return r
	}
	p := pols[0]
	r.Policy, r.Digest = p.Lines(), p.Digest()
	if r.Err = rv.check(entry.SHA256, p); r.Err != nil {
		return r
	}
	prev, had, err := store.Lookup(n)
	if err != nil {
		r.Err = err
		return r
	}
	if had {
		r.Added = policy.Widening(prev.Policy, p)
	} else {
		for _, l := range r.Policy {
			r.Added = append(r.Added, "+ "+l)
		}
	}
	_, r.Err = store.Approve(n, entry.SHA256, p)
	return r
}

func checkScanner(name string, sc config.Scanner, pi PluginInfo) error {
	for _, info := range pi.Scanners {
		if info.Name != name {
			continue
		}
		if err := scheduler.CheckInfo(info); err != nil {
			return err
		}
		if err := launcher.CheckCommands(name, info); err != nil {
			return err
		}
		_, err := launcher.ResolveOptions(name, info.Options, sc.Options)
		return err
	}
	var served []string
	for _, info := range pi.Scanners {
		served = append(served, info.Name)
	}
	return fmt.Errorf("binary %s serves %v, not scanner %q", pi.Binary, served, name)
}

// PinInfo is what `ffscan plugins pin` reports about a scanner's binary.
type PinInfo struct {
	Scanner    string
	Binary     string
	Path       string
	SHA256     string
	Version    string
	APIVersion int
}

// Pin checks the binary that serves scanner name (configured, or found by
// what the plugins declare) the way a launch would, except for the pin
// itself: catalog checks, handshake, the scanner served with a usable
// Info, the configured options accepted. It returns the sha256 to pin.
func Pin(ctx context.Context, cfg *config.Config, name string, log hclog.Logger) (PinInfo, error) {
	s, err := open(cfg, log)
	if err != nil {
		return PinInfo{}, err
	}
	defer s.close()
	sc, _, pi, err := s.check(ctx, name, false)
	if err != nil {
		return PinInfo{Scanner: name}, err
	}
	out := PinInfo{Scanner: name, Binary: sc.Plugin, Path: pi.Path, SHA256: pi.SHA256, APIVersion: pi.APIVersion}
	if pi.Err != nil {
		return out, pi.Err
	}
	for _, in := range pi.Scanners {
		if in.Name == name {
			out.Version = in.Version
		}
	}
	return out, nil
}

// InspectFile launches the binary at path (outside plugin_dir, e.g. a
// publisher's build output) long enough to read its scanners' Info,
// under cfg's probe: what `ffscan plugins publish` declares.
func InspectFile(ctx context.Context, cfg *config.Config, path string, log hclog.Logger) PluginInfo {
	name := filepath.Base(path)
	cat, err := catalog.New(filepath.Dir(path))
	if err != nil {
		return PluginInfo{Binary: name, Err: err}
	}
	defer cat.Close()
	return inspect(ctx, cat, name, "", ProbeOf(cfg), log)
}
