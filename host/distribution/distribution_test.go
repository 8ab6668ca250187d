package distribution_test

import (
	"archive/tar"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/distribution"
	"github.com/ffscan/ffscan/host/policy"
	"github.com/ffscan/ffscan/internal/registrytest"
)

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

func trusted(name string, k *ecdsa.PrivateKey) distribution.TrustedKey {
	return distribution.TrustedKey{Name: name, Key: &k.PublicKey}
}

func declared(version string) distribution.Declared {
	return distribution.Declared{Schema: 1, Plugin: "acme", Version: version, Scanners: []distribution.DeclaredScanner{{
		Name: "acme_sweeper", APIMin: 1, APIMax: 2,
		Policy: policy.Policy{Commands: map[string][]string{"DEL": {"ff:exec:*"}, "HGET": {}}, Functions: []string{}},
	}}}
}

// fixture is a publisher's binaries and an operator's empty plugin_dir
// and lock.
type fixture struct {
	key                 *ecdsa.PrivateKey
	bins                map[string]string
	pluginDir, lockFile string
}

func newFixture(t *testing.T, content string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{key: newKey(t), bins: map[string]string{}}
	for _, p := range []string{distribution.Platform(), "linux/riscv64"} {
		if p == distribution.Platform() && len(f.bins) > 0 {
			continue
		}
		path := filepath.Join(dir, strings.ReplaceAll(p, "/", "-"))
		require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n# "+content+" for "+p+"\n"), 0o755))
		f.bins[p] = path
	}
	f.pluginDir = filepath.Join(dir, "plugins")
	require.NoError(t, os.Mkdir(f.pluginDir, 0o755))
	f.lockFile = filepath.Join(dir, "plugins.lock")
	return f
}

func (f *fixture) publish(t *testing.T, ref string, o distribution.PublishOptions) ocispec.Descriptor {
	t.Helper()
	if o.Binaries == nil {
		o.Binaries = f.bins
	}
	if o.Declared.Plugin == "" {
		o.Declared = declared("1.0.0")
	}
	if o.Key == nil {
		o.Key = f.key
	}
	desc, err := distribution.Publish(context.Background(), ref, o)
	require.NoError(t, err)
	return desc
}

func (f *fixture) opts() distribution.Options {
	return distribution.Options{PluginDir: f.pluginDir, LockFile: f.lockFile, Keys: []distribution.TrustedKey{trusted("acme", f.key)}}
}

// refused checks an install was refused with nothing placed and the lock
// as it was.
func (f *fixture) refused(t *testing.T, ref string, o distribution.Options, want string) error {
	t.Helper()
	before, _ := os.ReadFile(f.lockFile)
	_, err := distribution.Install(context.Background(), ref, o)
	require.Error(t, err)
	require.Contains(t, err.Error(), want)
	ents, rerr := os.ReadDir(f.pluginDir)
	require.NoError(t, rerr)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(before) == 0 {
		require.Empty(t, names, "plugin_dir after a refused install")
	}
	after, _ := os.ReadFile(f.lockFile)
	require.Equal(t, string(before), string(after), "the lock after a refused install")
	return err
}

func TestInstallFromLayout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "v1")
	ref := "oci:" + filepath.Join(t.TempDir(), "layout") + ":1.0.0"
	desc := f.publish(t, ref, distribution.PublishOptions{})
	res, err := distribution.Install(context.Background(), ref, f.opts())
	require.NoError(t, err)
	require.Equal(t, "acme", res.Plugin)
	body, err := os.ReadFile(filepath.Join(f.pluginDir, "acme"))
	require.NoError(t, err)
	require.Contains(t, string(body), "v1 for "+distribution.Platform())
	st, _ := os.Stat(filepath.Join(f.pluginDir, "acme"))
	require.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	lock, err := distribution.ReadLock(f.lockFile)
	require.NoError(t, err)
	lp := lock.Plugins["acme"]
	require.Equal(t, desc.Digest.String(), lp.Digest)
	require.Len(t, lp.Platforms, 2, "every platform is locked")
	require.NoError(t, lock.CheckBinary("acme", sha(t, filepath.Join(f.pluginDir, "acme"))))
	require.Equal(t, "acme", lp.Signer.Key)
	require.Equal(t, distribution.Fingerprint(&f.key.PublicKey), lp.Signer.Fingerprint)
	require.Equal(t, declared("1.0.0").PolicyDigests(), lp.Policies)
	// The lock alone re-verifies: signature, index, manifests, binaries.
	signer, err := lp.VerifyOffline(f.opts().Trust(), time.Now())
	require.NoError(t, err)
	require.Equal(t, lp.Signer, signer)
	_, err = lp.VerifyOffline(distribution.Trust{Keys: []distribution.TrustedKey{trusted("other", newKey(t))}}, time.Now())
	require.ErrorIs(t, err, distribution.ErrUntrusted)
	forged := lp
	forged.Platforms = map[string]distribution.LockedPlatform{}
	for p, pl := range lp.Platforms {
		pl.SHA256 = strings.Repeat("0", 64)
		forged.Platforms[p] = pl
	}
	_, err = forged.VerifyOffline(f.opts().Trust(), time.Now())
	require.ErrorContains(t, err, "is not the locked sha256")
	// Nothing else was left in plugin_dir (no temporary file).
	ents, _ := os.ReadDir(f.pluginDir)
	require.Len(t, ents, 1)

	again, err := distribution.Install(context.Background(), ref, f.opts())
	require.NoError(t, err)
	require.True(t, again.Unchanged)
}

func sha(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return distribution.SHA256Hex(b)
}

func TestInstallFromRegistry(t *testing.T) {
	t.Parallel()
	addr := registrytest.Start(t)
	for _, tc := range []struct {
		name string
		o    distribution.PublishOptions
		via  string
	}{
		{"referrer", distribution.PublishOptions{NoSigTag: true}, "referrer"},
		{"sig-tag", distribution.PublishOptions{NoReferrer: true}, "sig-tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.name)
			ref := addr + "/acme/" + tc.name + ":1.0.0"
			f.publish(t, ref, tc.o)
			res, err := distribution.Install(context.Background(), ref, f.opts())
			require.NoError(t, err)
			require.Equal(t, tc.via, res.Locked.Signer.Via)
			_, err = res.Locked.VerifyOffline(f.opts().Trust(), time.Now())
			require.NoError(t, err)
			body, err := os.ReadFile(filepath.Join(f.pluginDir, "acme"))
			require.NoError(t, err)
			require.Contains(t, string(body), tc.name+" for "+distribution.Platform())
		})
	}

	t.Run("refusals", func(t *testing.T) {
		f := newFixture(t, "good")
		good := f.publish(t, addr+"/acme/good:1.0.0", distribution.PublishOptions{})
		// Unsigned.
		f.publish(t, addr+"/acme/unsigned:1.0.0", distribution.PublishOptions{NoReferrer: true, NoSigTag: true})
		err := f.refused(t, addr+"/acme/unsigned:1.0.0", f.opts(), "no signature found")
		require.ErrorIs(t, err, distribution.ErrUnsigned)
		// Signed by a key the operator does not trust.
		other := newKey(t)
		f.publish(t, addr+"/acme/other:1.0.0", distribution.PublishOptions{Key: other})
		err = f.refused(t, addr+"/acme/other:1.0.0", f.opts(), "no signature verifies with a trusted key")
		require.ErrorIs(t, err, distribution.ErrUntrusted)
		// A trusted signature of another artifact attached to this one
		// (both forms): the signatures are real, their subject is not.
		evil := newFixture(t, "evil")
		evilRef := addr + "/acme/good:evil"
		evilDesc := evil.publish(t, evilRef, distribution.PublishOptions{Key: other, NoReferrer: true, NoSigTag: true})
		_ = good
		swapBundle(t, addr+"/acme/good", f.key, evilDesc)
		err = f.refused(t, evilRef, f.opts(), "no signature verifies with a trusted key")
		require.Contains(t, err.Error(), "referrer signature")
		require.Contains(t, err.Error(), "sig-tag signature")
		// A digest that is not what the tag resolves to.
		f.refused(t, addr+"/acme/good@"+evilDesc.Digest.String(), f.opts(), "no signature verifies")
	})
}

// swapBundle attaches to target a bundle and a .sig signature by key of
// another artifact in the same repository (repo's 1.0.0).
func swapBundle(t *testing.T, repo string, key *ecdsa.PrivateKey, target ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	r, err := distribution.ParseRef(repo + ":1.0.0")
	require.NoError(t, err)
	tg, err := r.Open(distribution.Access{})
	require.NoError(t, err)
	src, err := tg.Resolve(ctx, "1.0.0")
	require.NoError(t, err)
	b, err := distribution.SignBundle(key, r.Repo, src.Digest.String())
	require.NoError(t, err)
	require.NoError(t, distribution.AttachBundleBytes(ctx, tg, target, b))
	// The .sig of src, copied under target's .sig tag.
	sigTag := strings.Replace(src.Digest.String(), ":", "-", 1) + ".sig"
	sd, err := tg.Resolve(ctx, sigTag)
	require.NoError(t, err)
	require.NoError(t, tg.Tag(ctx, sd, strings.Replace(target.Digest.String(), ":", "-", 1)+".sig"))
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := func(t *testing.T) string { return filepath.Join(t.TempDir(), "layout") }

	t.Run("no artifact for this platform", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		ref := "oci:" + layout(t) + ":1"
		f.publish(t, ref, distribution.PublishOptions{Binaries: map[string]string{"plan9/mips": f.bins[distribution.Platform()]}})
		err := f.refused(t, ref, f.opts(), "no artifact for this platform")
		require.ErrorIs(t, err, distribution.ErrNoPlatform)
	})
	t.Run("API range not served", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		ref := "oci:" + layout(t) + ":1"
		d := declared("1.0.0")
		d.Scanners[0].APIMin, d.Scanners[0].APIMax = 7, 9
		f.publish(t, ref, distribution.PublishOptions{Declared: d})
		f.refused(t, ref, f.opts(), "speaks scanner API 7..9, this host serves")
	})
	t.Run("policy wider than allowed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		ref := "oci:" + layout(t) + ":1"
		f.publish(t, ref, distribution.PublishOptions{})
		o := f.opts()
		o.Allowed = distribution.Allowed{Commands: []string{"HGET"}}
		f.refused(t, ref, o, `declares command "DEL", which plugin_trust.allow_commands does not allow`)
		o.Allowed = distribution.Allowed{Commands: []string{"HGET", "del"}}
		_, err := distribution.Install(ctx, ref, o)
		require.NoError(t, err)
	})
	t.Run("expired key", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		ref := "oci:" + layout(t) + ":1"
		f.publish(t, ref, distribution.PublishOptions{})
		o := f.opts()
		o.Keys[0].NotAfter = time.Now().Add(-time.Hour)
		f.refused(t, ref, o, "key expired at")
		o.Keys[0].NotAfter = time.Time{}
		o.Keys[0].NotBefore = time.Now().Add(time.Hour)
		f.refused(t, ref, o, "not valid before")
	})
	t.Run("tampered blob", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		dir := layout(t)
		ref := "oci:" + dir + ":1"
		f.publish(t, ref, distribution.PublishOptions{})
		// Replace the binary's bytes in the layout's blob store.
		sum := sha(t, f.bins[distribution.Platform()])
		blob := filepath.Join(dir, "blobs", "sha256", sum)
		require.NoError(t, os.Chmod(blob, 0o644))
		b, err := os.ReadFile(blob)
		require.NoError(t, err)
		b[len(b)-2] ^= 1
		require.NoError(t, os.WriteFile(blob, b, 0o644))
		f.refused(t, ref, f.opts(), "digest mismatch")
	})
	t.Run("tampered index", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		dir := layout(t)
		ref := "oci:" + dir + ":1"
		desc := f.publish(t, ref, distribution.PublishOptions{})
		hex := strings.TrimPrefix(desc.Digest.String(), "sha256:")
		blob := filepath.Join(dir, "blobs", "sha256", hex)
		b, err := os.ReadFile(blob)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(blob, 0o644))
		require.NoError(t, os.WriteFile(blob, []byte(strings.Replace(string(b), "1.0.0", "9.9.9", 1)), 0o644))
		f.refused(t, ref, f.opts(), "mismatch")
	})
	t.Run("digest mismatch", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		dir := layout(t)
		f.publish(t, "oci:"+dir+":1", distribution.PublishOptions{})
		f.refused(t, "oci:"+dir+"@sha256:"+strings.Repeat("ab", 32), f.opts(), "not found")
	})
	t.Run("downgrade", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		dir := layout(t)
		f.publish(t, "oci:"+dir+":2", distribution.PublishOptions{Declared: declared("2.0.0")})
		f.publish(t, "oci:"+dir+":1", distribution.PublishOptions{Declared: declared("1.9.0")})
		_, err := distribution.Install(ctx, "oci:"+dir+":2", f.opts())
		require.NoError(t, err)
		before, _ := os.ReadFile(filepath.Join(f.pluginDir, "acme"))
		lockBefore, _ := os.ReadFile(f.lockFile)
		_, err = distribution.Install(ctx, "oci:"+dir+":1", f.opts())
		require.ErrorIs(t, err, distribution.ErrDowngrade)
		after, _ := os.ReadFile(filepath.Join(f.pluginDir, "acme"))
		lockAfter, _ := os.ReadFile(f.lockFile)
		require.Equal(t, before, after)
		require.Equal(t, lockBefore, lockAfter)
		// Same version, created earlier: also older.
		f.publish(t, "oci:"+dir+":2old", distribution.PublishOptions{Declared: declared("2.0.0"), Created: time.Now().Add(-48 * time.Hour)})
		_, err = distribution.Install(ctx, "oci:"+dir+":2old", f.opts())
		require.ErrorIs(t, err, distribution.ErrDowngrade)
		o := f.opts()
		o.AllowDowngrade = true
		_, err = distribution.Install(ctx, "oci:"+dir+":1", o)
		require.NoError(t, err)
	})
	t.Run("dry run", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		ref := "oci:" + layout(t) + ":1"
		f.publish(t, ref, distribution.PublishOptions{})
		o := f.opts()
		o.DryRun = true
		res, err := distribution.Install(ctx, ref, o)
		require.NoError(t, err)
		require.True(t, res.DryRun)
		ents, _ := os.ReadDir(f.pluginDir)
		require.Empty(t, ents)
		_, err = os.Stat(f.lockFile)
		require.True(t, errors.Is(err, os.ErrNotExist))
	})
	t.Run("lock only", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "x")
		ref := "oci:" + layout(t) + ":1"
		f.publish(t, ref, distribution.PublishOptions{})
		res, err := distribution.LockOnly(ctx, ref, f.opts())
		require.NoError(t, err)
		require.Len(t, res.Locked.Platforms, 2)
		ents, _ := os.ReadDir(f.pluginDir)
		require.Empty(t, ents)
		lock, err := distribution.ReadLock(f.lockFile)
		require.NoError(t, err)
		require.Len(t, lock.Plugins["acme"].Platforms, 2)
	})
}

// A registry that wants credentials: without them the install is refused
// (nothing changed), with the operator's Docker-style config it works.
func TestInstallFromRegistryWithCredentials(t *testing.T) {
	t.Parallel()
	addr := registrytest.Start(t, registrytest.WithAuth())
	creds := distribution.Access{AuthFile: registrytest.DockerConfig(t, addr)}
	f := newFixture(t, "auth")
	ref := addr + "/acme/private:1.0.0"
	_, err := distribution.Publish(context.Background(), ref, distribution.PublishOptions{
		Binaries: f.bins, Declared: declared("1.0.0"), Key: f.key, Access: distribution.Access{AuthFile: filepath.Join(t.TempDir(), "none.json")},
	})
	require.ErrorContains(t, err, "none.json")
	f.publish(t, ref, distribution.PublishOptions{Access: creds})

	o := f.opts()
	o.Access = distribution.Access{AuthFile: registrytest.DockerConfig(t, "127.0.0.1:1")}
	f.refused(t, ref, o, "credential")
	o.Access = creds
	res, err := distribution.Install(context.Background(), ref, o)
	require.NoError(t, err)
	require.Equal(t, "acme", res.Plugin)
}

// An OCI layout archive (a tar of the layout directory), for hosts
// without a network: installed from in place, read-only.
func TestInstallFromLayoutArchive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "tar")
	dir := filepath.Join(t.TempDir(), "layout")
	desc := f.publish(t, "oci:"+dir+":1.0.0", distribution.PublishOptions{})
	archive := filepath.Join(t.TempDir(), "stalescan.tar")
	tarDir(t, dir, archive)
	res, err := distribution.Install(context.Background(), "oci-archive:"+archive+":1.0.0", f.opts())
	require.NoError(t, err)
	require.Equal(t, desc.Digest.String(), res.Locked.Digest)
	body, err := os.ReadFile(filepath.Join(f.pluginDir, "acme"))
	require.NoError(t, err)
	require.Contains(t, string(body), "tar for "+distribution.Platform())
	_, err = distribution.Publish(context.Background(), "oci-archive:"+archive+":2", distribution.PublishOptions{Binaries: f.bins, Declared: declared("2.0.0"), Key: f.key})
	require.ErrorContains(t, err, "read-only")
}

func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	require.NoError(t, err)
	tw := tar.NewWriter(f)
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}))
	require.NoError(t, tw.Close())
	require.NoError(t, f.Close())
}

// Installs of two plugins at once both end up in the lock.
func TestConcurrentInstallsKeepBothLockEntries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "x")
	ctx := context.Background()
	refs := make([]string, 2)
	for i, name := range []string{"alpha", "beta"} {
		d := declared("1.0.0")
		d.Plugin, d.Scanners[0].Name = name, name
		refs[i] = "oci:" + filepath.Join(t.TempDir(), "layout") + ":1"
		f.publish(t, refs[i], distribution.PublishOptions{Declared: d})
	}
	errs := make(chan error, len(refs))
	for _, ref := range refs {
		go func() {
			_, err := distribution.Install(ctx, ref, f.opts())
			errs <- err
		}()
	}
	for range refs {
		require.NoError(t, <-errs)
	}
	lock, err := distribution.ReadLock(f.lockFile)
	require.NoError(t, err)
	require.Len(t, lock.Plugins, 2)
}
