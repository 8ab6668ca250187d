// Package distribution installs scanner plugins from OCI registries and
// OCI layout directories: a plugin is published as an image index with
// one manifest per platform (the binary as its layer, the declared
// manifest as its config), signed cosign-style (a Sigstore bundle
// attached as an OCI referrer, and/or a cosign simple-signing ".sig"
// tag). Install resolves a reference, verifies a signature by a key the
// operator trusts (sigstore-go), checks the declared manifest against
// this host, records the lock file and only then places the binary in
// plugin_dir atomically, where the running host's file watch hot-swaps
// it under its usual pin and approval rules.
package distribution

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Media types of a plugin artifact.
const (
	// ArtifactType is the artifact type of one platform's manifest.
	ArtifactType = "application/vnd.ffscan.plugin.v1"
	// ConfigMediaType is the declared manifest (Declared, JSON), the
	// config of each platform's manifest.
	ConfigMediaType = "application/vnd.ffscan.plugin.config.v1+json"
	// BinaryMediaType is the plugin executable, the single layer.
	BinaryMediaType = "application/vnd.ffscan.plugin.binary.v1"
	// BundleMediaType is a Sigstore bundle (cosign's new bundle format),
	// both the artifact type of its referrer manifest and its layer.
	BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// SimpleSigningMediaType is cosign's legacy signature layer.
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// CosignSignatureAnnotation holds a simple-signing layer's signature.
	CosignSignatureAnnotation = "dev.cosignproject.cosign/signature"
	// CreatedAnnotation and VersionAnnotation are set on the index.
	CreatedAnnotation = "org.opencontainers.image.created"
	VersionAnnotation = "org.opencontainers.image.version"
)

// Declared is what a plugin artifact says about itself, checked against
// the host before anything is installed.
type Declared struct {
	Schema int `json:"schema"`
	// Plugin is the binary's file name in plugin_dir.
	Plugin string `json:"plugin"`
	// Version is the plugin's version (semver, "v" optional); an
	// install never goes below the locked one unless asked to.
	Version  string            `json:"version"`
	Scanners []DeclaredScanner `json:"scanners"`
}

// DeclaredScanner is one scanner the binary serves.
type DeclaredScanner struct {
	Name string `json:"name"`
	// APIMin and APIMax are the scanner API versions the binary speaks.
	APIMin int `json:"api_min"`
	APIMax int `json:"api_max"`
	// Policy is the scanner's declared policy (host/policy); the host
	// still admits the binary's own declaration at launch.
	Policy policy.Policy `json:"policy"`
}

var (
	pluginNameRE  = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)
	scannerNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
)

// Platform is this host's GOOS/GOARCH.
func Platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// DeclaredFromInfo is the declaration of a binary whose scanners answered
// infos (what `ffscan plugins publish` reads from the host-platform
// binary).
func DeclaredFromInfo(plugin, version string, infos []scannerapi.Info) Declared {
	d := Declared{Schema: 1, Plugin: plugin, Version: version}
	for _, in := range infos {
		d.Scanners = append(d.Scanners, DeclaredScanner{Name: in.Name, APIMin: in.APIVersion, APIMax: in.APIVersion, Policy: policy.FromInfo(in)})
	}
	slices.SortFunc(d.Scanners, func(a, b DeclaredScanner) int { return strings.Compare(a.Name, b.Name) })
	return d
}

// ParseDeclared decodes a declared manifest, refusing unknown fields.
func ParseDeclared(b []byte) (Declared, error) {
	var d Declared
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("declared manifest: %w", err)
	}
	return d, nil
}

// Allowed is what the operator lets an install declare
// (plugin_trust.allow_commands / allow_functions; empty: no ceiling, the
// host's approval rules alone).
type Allowed struct {
	Commands  []string
	Functions []string
}

// Check refuses a declaration this host cannot or may not run: a bad
// name, no scanners, an API range the host does not serve, a command or
// function outside what the operator allows.
func (d Declared) Check(allowed Allowed) error {
	return d.check(true, allowed)
}

// Validate checks the declaration's shape alone (what a publisher
// checks: the hosts it is for are elsewhere).
func (d Declared) Validate() error { return d.check(false, Allowed{}) }

func (d Declared) check(host bool, allowed Allowed) error {
	var errs []error
	if d.Schema != 1 {
		errs = append(errs, fmt.Errorf("schema %d is not 1 (a newer ffscan published it?)", d.Schema))
	}
	if !pluginNameRE.MatchString(d.Plugin) {
		errs = append(errs, fmt.Errorf("plugin name %q is not a plain file name", d.Plugin))
	}
	if len(d.Scanners) == 0 {
		errs = append(errs, errors.New("it declares no scanner"))
	}
	if d.Version != "" {
		if _, ok := parseVersion(d.Version); !ok {
			errs = append(errs, fmt.Errorf("version %q is not semver (1.2.3)", d.Version))
		}
	}
	minAPI, maxAPI := pluginhost.MinAPIVersion, scannerapi.APIVersion
	seen := map[string]bool{}
	for _, s := range d.Scanners {
		if !scannerNameRE.MatchString(s.Name) {
			errs = append(errs, fmt.Errorf("scanner name %q must be 1-64 of a-z, 0-9, '_' and '-'", s.Name))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("scanner %s is declared twice", s.Name))
		}
		seen[s.Name] = true
		if s.APIMin < 1 || s.APIMax < s.APIMin {
			errs = append(errs, fmt.Errorf("scanner %s: API range %d..%d is not a range", s.Name, s.APIMin, s.APIMax))
		} else if host && (s.APIMax < minAPI || s.APIMin > maxAPI) {
			errs = append(errs, fmt.Errorf("scanner %s: speaks scanner API %d..%d, this host serves %d..%d", s.Name, s.APIMin, s.APIMax, minAPI, maxAPI))
		}
		if err := s.Policy.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("scanner %s: declared policy: %w", s.Name, err))
		}
		if len(allowed.Commands) > 0 {
			for cmd := range s.Policy.Commands {
				if !slices.ContainsFunc(allowed.Commands, func(a string) bool { return strings.EqualFold(a, cmd) }) {
					errs = append(errs, fmt.Errorf("scanner %s: declares command %s, which plugin_trust.allow_commands does not allow", s.Name, strconv.Quote(cmd)))
				}
			}
		}
		if len(allowed.Functions) > 0 {
			for _, fn := range s.Policy.Functions {
				if !slices.Contains(allowed.Functions, fn) {
					errs = append(errs, fmt.Errorf("scanner %s: declares function %s, which plugin_trust.allow_functions does not allow", s.Name, strconv.Quote(fn)))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// PolicyDigests names each scanner's declared policy (policy.Digest).
func (d Declared) PolicyDigests() map[string]string {
	out := map[string]string{}
	for _, s := range d.Scanners {
		out[s.Name] = s.Policy.Digest()
	}
	return out
}

// ScannerNames lists the declared scanners.
func (d Declared) ScannerNames() []string {
	var out []string
	for _, s := range d.Scanners {
		out = append(out, s.Name)
	}
	return out
}

// parseVersion reads major.minor.patch (a leading v and a -pre or +build
// suffix allowed; the suffix is ignored for ordering).
func parseVersion(v string) ([3]int, bool) {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	var out [3]int
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// olderVersion reports whether a is older than b (both semver).
func olderVersion(a, b string) bool {
	va, oka := parseVersion(a)
	vb, okb := parseVersion(b)
	if !oka || !okb {
		return false
	}
	for i := range va {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	return false
}
