package distribution_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/distribution"
	"github.com/ffscan/ffscan/internal/registrytest"
)

const (
	ghIssuer  = "https://token.actions.githubusercontent.com"
	ghSubject = "https://github.com/acme/scanners/.github/workflows/release.yml@refs/heads/main"
)

// virtualSigstore is sigstore-go's own test instance (a Fulcio CA, a
// Rekor log and a timestamp authority, all in memory), and its trusted
// root written as the JSON file an operator would copy onto an
// air-gapped host, read back as the configuration reads it.
func virtualSigstore(t *testing.T) (*ca.VirtualSigstore, *root.TrustedRoot) {
	vs, tr, _ := virtualSigstoreFile(t)
	return vs, tr
}

func virtualSigstoreFile(t *testing.T) (*ca.VirtualSigstore, *root.TrustedRoot, string) {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	require.NoError(t, err)
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(), rawLogIDs(t, vs.CTLogs()), vs.TimestampingAuthorities(), rawLogIDs(t, vs.RekorLogs()))
	require.NoError(t, err)
	b, err := tr.MarshalJSON()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "trusted_root.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	read, err := root.NewTrustedRootFromPath(path)
	require.NoError(t, err)
	return vs, read, path
}

// rawLogIDs gives the virtual logs the IDs a real trusted root has: the
// virtual instance keeps a log's ID as the text of its hex (which it
// only compares in memory), a trusted root file holds the raw key ID
// and is keyed by its hex once read.
func rawLogIDs(t *testing.T, logs map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
	t.Helper()
	out := map[string]*root.TransparencyLog{}
	for id, l := range logs {
		raw, err := hex.DecodeString(id)
		require.NoError(t, err)
		c := *l
		c.ID = raw
		out[id] = &c
	}
	return out
}

// keylessBundle is what `cosign sign` without a key makes for digest at
// repo: a Sigstore bundle v0.3 with a Fulcio certificate for subject
// from issuer, a DSSE in-toto statement naming the digest, its Rekor
// entry (inclusion proof and signed entry timestamp) and an RFC 3161
// timestamp, all from vs.
func keylessBundle(t *testing.T, vs *ca.VirtualSigstore, subject, issuer, repo, digest string) []byte {
	t.Helper()
	st, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []map[string]any{{"name": repo, "digest": map[string]string{"sha256": strings.TrimPrefix(digest, "sha256:")}}},
		"predicateType": "https://sigstore.dev/cosign/sign/v1",
		"predicate":     map[string]any{},
	})
	require.NoError(t, err)
	// The virtual CA issues its certificate valid from now: the log's
	// time must fall inside it.
	ent, err := vs.AttestAtTime(subject, issuer, st, time.Now().Add(time.Minute), true)
	require.NoError(t, err)

	vc, err := ent.VerificationContent()
	require.NoError(t, err)
	sc, err := ent.SignatureContent()
	require.NoError(t, err)
	env := sc.(*bundle.Envelope).Envelope
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	require.NoError(t, err)
	var sigs []*protodsse.Signature
	for _, s := range env.Signatures {
		raw, err := base64.StdEncoding.DecodeString(s.Sig)
		require.NoError(t, err)
		sigs = append(sigs, &protodsse.Signature{Sig: raw, Keyid: s.KeyID})
	}
	entries, err := ent.TlogEntries()
	require.NoError(t, err)
	var tles []*protorekor.TransparencyLogEntry
	for _, e := range entries {
		tle := e.TransparencyLogEntry()
		// The entry the virtual log returns lacks what a bundle
		// carries beside it: its kind and its signed entry timestamp
		// (the log's signature over the entry, made here as the log
		// makes it).
		tle.KindVersion = &protorekor.KindVersion{Kind: "dsse", Version: "0.0.1"}
		set, err := vs.RekorSignPayload(tlog.RekorPayload{
			Body:           base64.StdEncoding.EncodeToString(tle.CanonicalizedBody),
			IntegratedTime: tle.IntegratedTime,
			LogIndex:       tle.LogIndex,
			LogID:          hex.EncodeToString(tle.LogId.KeyId),
		})
		require.NoError(t, err)
		tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
		tles = append(tles, tle)
	}
	tss, err := ent.Timestamps()
	require.NoError(t, err)
	var rfc []*protocommon.RFC3161SignedTimestamp
	for _, ts := range tss {
		rfc = append(rfc, &protocommon.RFC3161SignedTimestamp{SignedTimestamp: ts})
	}
	pb := &protobundle.Bundle{
		MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content:                   &protobundle.VerificationMaterial_Certificate{Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw}},
			TlogEntries:               tles,
			TimestampVerificationData: &protobundle.TimestampVerificationData{Rfc3161Timestamps: rfc},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{Payload: payload, PayloadType: env.PayloadType, Signatures: sigs}},
	}
	b, err := bundle.NewBundle(pb)
	require.NoError(t, err)
	out, err := b.MarshalJSON()
	require.NoError(t, err)
	return out
}

// attachKeyless publishes an unsigned artifact at ref and attaches a
// keyless bundle for signedDigest (its own digest when empty).
func attachKeyless(t *testing.T, f *fixture, ref string, vs *ca.VirtualSigstore, subject, issuer, signedDigest string) ocispec.Descriptor {
	t.Helper()
	desc := f.publish(t, ref, distribution.PublishOptions{NoReferrer: true, NoSigTag: true})
	if signedDigest == "" {
		signedDigest = desc.Digest.String()
	}
	r, err := distribution.ParseRef(ref)
	require.NoError(t, err)
	tg, err := r.Open(distribution.Access{})
	require.NoError(t, err)
	b := keylessBundle(t, vs, subject, issuer, r.Repo, signedDigest)
	require.NoError(t, distribution.AttachBundleBytes(context.Background(), tg, desc, b))
	return desc
}

func keylessOpts(f *fixture, tr root.TrustedMaterial, ids ...distribution.TrustedIdentity) distribution.Options {
	if len(ids) == 0 {
		ids = []distribution.TrustedIdentity{{Name: "acme-ci", Issuer: ghIssuer, Subject: ghSubject}}
	}
	return distribution.Options{PluginDir: f.pluginDir, LockFile: f.lockFile, Identities: ids, TrustedRoot: tr}
}

func TestKeylessInstallFromLayout(t *testing.T) {
	t.Parallel()
	vs, tr := virtualSigstore(t)
	dir := t.TempDir()
	layout := func(name string) string { return "oci:" + filepath.Join(dir, name) + ":1.0.0" }

	t.Run("installed with the trusted identity, re-checked offline", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "keyless")
		ref := layout("good")
		attachKeyless(t, f, ref, vs, ghSubject, ghIssuer, "")
		res, err := distribution.Install(context.Background(), ref, keylessOpts(f, tr))
		require.NoError(t, err)
		s := res.Locked.Signer
		require.Equal(t, distribution.Signer{Identity: "acme-ci", Issuer: ghIssuer, Subject: ghSubject, Via: "referrer"}, s)
		require.FileExists(t, filepath.Join(f.pluginDir, "acme"))

		lock, err := distribution.ReadLock(f.lockFile)
		require.NoError(t, err)
		lp := lock.Plugins["acme"]
		require.Equal(t, s, lp.Signer)
		got, err := lp.VerifyOffline(keylessOpts(f, tr).Trust(), time.Now())
		require.NoError(t, err)
		require.Equal(t, s, got)
		// Offline, another root or another identity does not vouch
		// for the locked evidence.
		_, other := virtualSigstore(t)
		_, err = lp.VerifyOffline(keylessOpts(f, other).Trust(), time.Now())
		require.ErrorIs(t, err, distribution.ErrUntrusted)
		_, err = lp.VerifyOffline(keylessOpts(f, tr, distribution.TrustedIdentity{Name: "x", Issuer: ghIssuer, Subject: ghSubject + "x"}).Trust(), time.Now())
		require.ErrorIs(t, err, distribution.ErrUntrusted)
		// Identities without a root verify nothing.
		_, err = lp.VerifyOffline(keylessOpts(f, nil).Trust(), time.Now())
		require.ErrorIs(t, err, distribution.ErrUntrusted)
		require.Contains(t, err.Error(), "no trusted root is configured")
		// Keys alone cannot verify a certificate.
		_, err = lp.VerifyOffline(distribution.Trust{Keys: []distribution.TrustedKey{trusted("acme", f.key)}}, time.Now())
		require.ErrorIs(t, err, distribution.ErrUntrusted)
		require.Contains(t, err.Error(), "no identity is trusted")
	})

	t.Run("subject regexp matches the whole subject", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "regexp")
		ref := layout("regexp")
		attachKeyless(t, f, ref, vs, ghSubject, ghIssuer, "")
		res, err := distribution.Install(context.Background(), ref, keylessOpts(f, tr, distribution.TrustedIdentity{
			Name: "acme-releases", Issuer: ghIssuer, SubjectRegexp: `https://github\.com/acme/scanners/\.github/workflows/release\.yml@refs/.*`,
		}))
		require.NoError(t, err)
		require.Equal(t, ghSubject, res.Locked.Signer.Subject)
		// A pattern for a prefix of the subject does not match it.
		g := newFixture(t, "prefix")
		f.refused(t, ref, keylessOpts(g, tr, distribution.TrustedIdentity{Name: "prefix", Issuer: ghIssuer, SubjectRegexp: `https://github\.com/acme/scanners`}), "identity prefix")
	})

	for _, tc := range []struct {
		name, subject, issuer string
		otherSigstore         bool
		otherDigest           bool
		why                   string
	}{
		{name: "wrong subject", subject: "https://github.com/mallory/scanners/.github/workflows/release.yml@refs/heads/main", issuer: ghIssuer, why: "expected SAN value"},
		{name: "wrong issuer", subject: ghSubject, issuer: "https://accounts.example.com", why: "expected issuer value"},
		// Its log is not in the pinned root: refused before its CA is
		// looked at (the next test isolates the CA).
		{name: "untrusted sigstore", subject: ghSubject, issuer: ghIssuer, otherSigstore: true, why: "log"},
		{name: "another artifact", subject: ghSubject, issuer: ghIssuer, otherDigest: true, why: "does not match any digest"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tc.name)
			signer := vs
			if tc.otherSigstore {
				signer, _ = virtualSigstore(t)
			}
			signed := ""
			if tc.otherDigest {
				signed = f.publish(t, layout(strings.ReplaceAll(tc.name, " ", "-")+"-other"), distribution.PublishOptions{
					Declared: declared("9.9.9"), NoReferrer: true, NoSigTag: true,
				}).Digest.String()
			}
			ref := layout(strings.ReplaceAll(tc.name, " ", "-"))
			attachKeyless(t, f, ref, signer, tc.subject, tc.issuer, signed)
			err := f.refused(t, ref, keylessOpts(f, tr), "signature with identity acme-ci")
			require.ErrorIs(t, err, distribution.ErrUntrusted)
			if !tc.otherSigstore && !tc.otherDigest {
				// The refusal names who the certificate is for.
				require.Contains(t, err.Error(), "the certificate is for "+tc.subject+" from "+tc.issuer)
			}
		})
	}
}

// A root that trusts the signature's log and timestamp authority but
// another Fulcio CA: the certificate chain alone refuses it.
func TestKeylessCertificateFromAnUntrustedCA(t *testing.T) {
	t.Parallel()
	vs, _ := virtualSigstore(t)
	other, _ := virtualSigstore(t)
	mixed, err := root.NewTrustedRoot(root.TrustedRootMediaType01, other.FulcioCertificateAuthorities(), nil, vs.TimestampingAuthorities(), rawLogIDs(t, vs.RekorLogs()))
	require.NoError(t, err)
	f := newFixture(t, "ca")
	ref := "oci:" + filepath.Join(t.TempDir(), "layout") + ":1.0.0"
	attachKeyless(t, f, ref, vs, ghSubject, ghIssuer, "")
	err = f.refused(t, ref, keylessOpts(f, mixed), "signature with identity acme-ci")
	require.ErrorIs(t, err, distribution.ErrUntrusted)
	require.Contains(t, err.Error(), "leaf certificate verification failed")
}

func TestKeylessInstallFromRegistry(t *testing.T) {
	t.Parallel()
	addr := registrytest.Start(t)
	vs, tr, rootFile := virtualSigstoreFile(t)

	f := newFixture(t, "keyless")
	ref := addr + "/acme/keyless:1.0.0"
	attachKeyless(t, f, ref, vs, ghSubject, ghIssuer, "")
	// The operator's configuration: the root file copied onto the
	// host, a keyless identity that is not the signer's and one that is.
	cfgFile := filepath.Join(t.TempDir(), "ffscan.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`
plugin_dir: `+f.pluginDir+`
plugin_lock_file: `+f.lockFile+`
plugin_signature: required
plugin_trust:
  trusted_root: `+rootFile+`
  identities:
    other: {issuer: `+ghIssuer+`, subject: "https://github.com/other/x/.github/workflows/r.yml@refs/heads/main"}
    acme-ci: {issuer: `+ghIssuer+`, subject: "`+ghSubject+`"}
`), 0o600))
	cfg, err := config.Load(config.Sources{File: cfgFile, Environ: []string{}})
	require.NoError(t, err)
	o, err := distribution.OptionsFromConfig(cfg)
	require.NoError(t, err)
	require.Len(t, o.Identities, 2)
	res, err := distribution.Install(context.Background(), ref, o)
	require.NoError(t, err)
	require.Equal(t, "acme-ci", res.Locked.Signer.Identity)
	_, err = res.Locked.VerifyOffline(o.Trust(), time.Now())
	require.NoError(t, err)

	// A key-based signature, with no key trusted, is refused saying so.
	kref := addr + "/acme/keyed:1.0.0"
	k := newFixture(t, "keyed")
	k.publish(t, kref, distribution.PublishOptions{})
	err = k.refused(t, kref, keylessOpts(k, tr), "referrer signature: by a key, but no key is trusted")
	require.Contains(t, err.Error(), "sig-tag signature: by a key, but no key is trusted")

	g := newFixture(t, "mallory")
	mref := addr + "/acme/mallory:1.0.0"
	attachKeyless(t, g, mref, vs, "mallory@example.com", "https://accounts.example.com", "")
	err = g.refused(t, mref, keylessOpts(g, tr), "signature with identity acme-ci")
	require.ErrorIs(t, err, distribution.ErrUntrusted)
}
