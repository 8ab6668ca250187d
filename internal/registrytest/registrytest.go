// Package registrytest starts a real OCI registry (Debian's
// docker-registry, the CNCF distribution server) for tests: on a free
// loopback port, with a temporary configuration and storage directory,
// killed and removed when the test ends.
package registrytest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ffscan/ffscan/internal/proctest"
)

// RequireEnv makes a missing registry binary fail tests instead of
// skipping them (.ci/run sets it).
const RequireEnv = "FFSCAN_TEST_REQUIRE_REGISTRY"

// Binary is the registry executable, or "" when none is installed.
func Binary() string {
	for _, name := range []string{"docker-registry", "registry"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	for _, p := range []string{"/usr/bin/docker-registry", "/usr/sbin/docker-registry"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// User and Password are the credentials a registry started WithAuth
// accepts (htpasswd takes bcrypt: passwordHash is Password's, at the
// lowest cost, since the registry checks it on every request).
const (
	User         = "publisher"
	Password     = "plugin-s3cret"
	passwordHash = "$2a$04$lu3YBCCDA3zIrnyIxuOiGeIELN6LvOawSVYCo55O6lgQFq7Ts2o1K"
)

// Option changes the registry Start runs.
type Option func(*options)

type options struct{ auth bool }

// WithAuth makes the registry require User and Password (HTTP basic
// authentication against an htpasswd file).
func WithAuth() Option { return func(o *options) { o.auth = true } }

// DockerConfig writes a Docker-style config.json holding User and
// Password for addr, and returns its path.
func DockerConfig(t testing.TB, addr string) string {
	t.Helper()
	cred := base64.StdEncoding.EncodeToString([]byte(User + ":" + Password))
	b, err := json.Marshal(map[string]any{"auths": map[string]any{addr: map[string]string{"auth": cred}}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Start runs a registry for t and returns its host:port.
func Start(t testing.TB, opts ...Option) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("no docker-registry on PATH (%s is set): apt-get install docker-registry", RequireEnv)
		}
		t.Skip("no docker-registry on PATH (apt-get install docker-registry)")
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	dir := t.TempDir()
	authConf := ""
	if o.auth {
		hp := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(hp, []byte(User+":"+passwordHash+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		authConf = fmt.Sprintf("auth:\n  htpasswd:\n    realm: ffscan-test\n    path: %s\n", hp)
	}
	for attempt := 0; ; attempt++ {
		addr := proctest.FreeAddr(t)
		cfg := filepath.Join(dir, "config.yml")
		body := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
%s`, filepath.Join(dir, "storage"), addr, authConf)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "serve", cfg)
		logf, err := os.Create(filepath.Join(dir, "registry.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-done
			logf.Close()
		}
		if waitReady(addr, done) {
			t.Cleanup(stop)
			return addr
		}
		stop()
		if attempt == 2 {
			log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("registry did not start on %s:\n%s", addr, log)
		}
	}
}

func waitReady(addr string, done <-chan struct{}) bool {
	deadline := time.Now().Add(10 * time.Second)
	cl := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return false
		default:
		}
		if resp, err := cl.Get("http://" + addr + "/v2/"); err == nil {
			resp.Body.Close()
			// 401: up, and asking for the credentials (WithAuth).
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
