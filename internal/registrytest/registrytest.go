// Package registrytest starts a real OCI registry (Debian's
// docker-registry, the CNCF distribution server) for tests: on a free
// loopback port, with a temporary configuration and storage directory,
// killed and removed when the test ends.
package registrytest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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

// Start runs a registry for t and returns its host:port.
func Start(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("no docker-registry on PATH (%s is set): apt-get install docker-registry", RequireEnv)
		}
		t.Skip("no docker-registry on PATH (apt-get install docker-registry)")
	}
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		addr := freeAddr(t)
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
`, filepath.Join(dir, "storage"), addr)
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
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
