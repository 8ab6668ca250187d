package distribution

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// Source is where plugin artifacts are read: a registry repository, an
// OCI layout directory or an OCI layout archive (tar).
type Source = oras.ReadOnlyGraphTarget

// Target is where plugin artifacts are pushed: a registry repository or
// an OCI layout directory.
type Target = oras.GraphTarget

// Ref is a parsed plugin reference.
type Ref struct {
	// Raw is the reference as given.
	Raw string
	// Layout is the OCI layout directory (oci:DIR:TAG, oci:DIR@DIGEST),
	// or the archive (oci-archive:FILE.tar:TAG); empty for a registry.
	Layout string
	// Archive says Layout is a tar archive of an OCI layout (read-only).
	Archive bool
	// Repo names the repository (registry/repo, or the layout's path):
	// the identity signatures name.
	Repo string
	// Tag or Digest is what resolves (one of them).
	Tag, Digest string
}

// Reference is the tag or digest to resolve.
func (r Ref) Reference() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}

// WithReference is r naming another tag or digest of its repository.
func (r Ref) WithReference(ref string) Ref {
	n := r
	n.Tag, n.Digest = "", ""
	if strings.HasPrefix(ref, "sha256:") {
		n.Digest = ref
	} else {
		n.Tag = ref
	}
	if r.Layout != "" {
		scheme := "oci:"
		if r.Archive {
			scheme = "oci-archive:"
		}
		n.Raw = scheme + r.Layout + sep(ref) + ref
	} else {
		n.Raw = r.Repo + sep(ref) + ref
	}
	return n
}

func sep(ref string) string {
	if strings.HasPrefix(ref, "sha256:") {
		return "@"
	}
	return ":"
}

// ParseRef reads REF: oci:DIR[:TAG|@DIGEST] for an OCI layout directory,
// else REGISTRY/REPO[:TAG|@DIGEST]. A reference without a tag or digest
// means the tag "latest".
func ParseRef(s string) (Ref, error) {
	r := Ref{Raw: s}
	rest, archive := strings.CutPrefix(s, "oci-archive:")
	if !archive {
		rest, _ = strings.CutPrefix(s, "oci:")
	}
	if r.Archive = archive; archive || strings.HasPrefix(s, "oci:") {
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			r.Layout, r.Digest = rest[:i], rest[i+1:]
		} else if i := strings.LastIndex(rest, ":"); i >= 0 && !strings.Contains(rest[i:], "/") {
			r.Layout, r.Tag = rest[:i], rest[i+1:]
		} else {
			r.Layout, r.Tag = rest, "latest"
		}
		if r.Layout == "" {
			return r, fmt.Errorf("reference %q: no directory or archive after the scheme", s)
		}
		r.Repo = r.Layout
		if r.Digest != "" {
			if _, err := sha256Hex(r.Digest); err != nil {
				return r, fmt.Errorf("reference %q: %w", s, err)
			}
		}
		return r, nil
	}
	pr, err := registry.ParseReference(s)
	if err != nil {
		return r, fmt.Errorf("reference %q: %w (a registry reference is host[:port]/repo:tag; an OCI layout directory is oci:DIR:tag)", s, err)
	}
	r.Repo = pr.Registry + "/" + pr.Repository
	switch {
	case pr.Reference == "":
		r.Tag = "latest"
	case strings.HasPrefix(pr.Reference, "sha256:"):
		r.Digest = pr.Reference
	default:
		r.Tag = pr.Reference
	}
	return r, nil
}

// Access is how registries are reached.
type Access struct {
	// PlainHTTP speaks HTTP to a registry that is not on loopback.
	PlainHTTP bool
	// AuthFile is a Docker-style config.json holding the registries'
	// credentials (empty: Docker's own, $DOCKER_CONFIG or
	// ~/.docker/config.json, when there is one).
	AuthFile string
}

// OpenSource returns what r names, to read from: an archive is read in
// place (oras reads the tar's entries, bounded by their sizes).
func (r Ref) OpenSource(ctx context.Context, a Access) (Source, error) {
	if r.Archive {
		return oci.NewFromTar(ctx, r.Layout)
	}
	return r.Open(a)
}

// Open returns the target of r; a registry on a loopback address is
// spoken to over plain HTTP, any other when a.PlainHTTP is set, with the
// credentials a.AuthFile holds for it.
func (r Ref) Open(a Access) (Target, error) {
	if r.Archive {
		return nil, fmt.Errorf("%s: an archive is read-only: publish to oci:DIR:TAG and tar the directory", r.Raw)
	}
	if r.Layout != "" {
		return oci.New(r.Layout)
	}
	repo, err := remote.NewRepository(r.Repo)
	if err != nil {
		return nil, err
	}
	var store credentials.Store
	if a.AuthFile != "" {
		if _, err := os.Stat(a.AuthFile); err != nil {
			return nil, fmt.Errorf("registry credentials: %w", err)
		}
		if store, err = credentials.NewStore(a.AuthFile, credentials.StoreOptions{}); err != nil {
			return nil, fmt.Errorf("registry credentials %s: %w", a.AuthFile, err)
		}
	} else if ds, err := credentials.NewStoreFromDocker(credentials.StoreOptions{}); err == nil {
		store = ds
	}
	cl := &auth.Client{Client: retry.DefaultClient, Cache: auth.NewCache()}
	if store != nil {
		cl.Credential = credentials.Credential(store)
	}
	repo.Client = cl
	host := repo.Reference.Registry
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); a.PlainHTTP || host == "localhost" || (ip != nil && ip.IsLoopback()) {
		repo.PlainHTTP = true
	}
	return repo, nil
}
