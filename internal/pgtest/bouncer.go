package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ffscan/ffscan/sdk/testserver"
)

// Bouncer is a PgBouncer in front of a Server, on a loopback port of its
// own, with its files in a temporary directory.
type Bouncer struct {
	Port int
	// Mode is its pool_mode: "session", "transaction" or "statement".
	Mode string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// ErrNoBouncer says no pgbouncer binary was found.
var ErrNoBouncer = errors.New("pgtest: no pgbouncer found (install Debian's pgbouncer, put it on PATH, or set FFSCAN_TEST_PGBOUNCER)")

// BouncerBin finds pgbouncer: $FFSCAN_TEST_PGBOUNCER, PATH, or Debian's
// /usr/sbin/pgbouncer (not on an ordinary user's PATH).
func BouncerBin() (string, error) {
	if p := os.Getenv("FFSCAN_TEST_PGBOUNCER"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoBouncer
}

// NewBouncer starts a pgbouncer in pool mode mode in front of s for one
// test, stopped when it ends. It skips the test, saying why, when no
// pgbouncer is installed, unless $FFSCAN_TEST_REQUIRE_PGBOUNCER is set
// (CI installs it and sets it).
func NewBouncer(t testing.TB, s *Server, mode string) *Bouncer {
	t.Helper()
	b, err := StartBouncer(s, mode)
	if errors.Is(err, ErrNoBouncer) && os.Getenv("FFSCAN_TEST_REQUIRE_PGBOUNCER") == "" {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// StartBouncer launches a pgbouncer in front of s; the caller stops it.
// Every database of s is reachable through it, as the superuser, without
// a password (auth_type trust, as the server's own).
func StartBouncer(s *Server, mode string) (*Bouncer, error) {
	bin, err := BouncerBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ffscan-pgbouncer-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Bouncer, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	// pgbouncer refuses to run as root, as PostgreSQL does.
	cred, err := runAs(dir)
	if err != nil {
		return fail(err)
	}
	b := &Bouncer{Mode: mode, dir: dir}
	for attempt := 0; ; attempt++ {
		if b.Port, err = testserver.FreePort(); err != nil {
			return fail(err)
		}
		ini := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = %s
max_client_conn = 500
default_pool_size = 20
logfile = %s
pidfile =
`, s.Port, b.Port, filepath.Join(dir, "users.txt"), mode, filepath.Join(dir, "pgbouncer.log"))
		for name, body := range map[string]string{"pgbouncer.ini": ini, "users.txt": `"postgres" ""` + "\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				return fail(err)
			}
		}
		cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if cred != nil {
			for _, f := range []string{"pgbouncer.ini", "users.txt"} {
				_ = os.Chown(filepath.Join(dir, f), int(cred.Uid), int(cred.Gid))
			}
		}
		if err := cmd.Start(); err != nil {
			return fail(fmt.Errorf("pgtest: start pgbouncer: %w", err))
		}
		b.cmd, b.done = cmd, make(chan struct{})
		go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(b.done)
		err = b.waitReady(30 * time.Second)
		if err == nil {
			return b, nil
		}
		b.kill()
		if attempt >= 2 {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return fail(fmt.Errorf("pgtest: pgbouncer did not come up: %v\n%s", err, log))
		}
	}
}

// DSN is dsn, a DSN of the bouncer's server, through the bouncer.
func (b *Bouncer) DSN(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return dsn
	}
	return strings.Replace(dsn, ":"+strconv.Itoa(int(cfg.Port))+"/", ":"+strconv.Itoa(b.Port)+"/", 1)
}

func (b *Bouncer) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", b.Port)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-b.done:
			return fmt.Errorf("pgbouncer exited: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

// Stop stops the bouncer (SIGINT: it closes its connections) and removes
// its directory.
func (b *Bouncer) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			b.kill()
		}
	}
	os.RemoveAll(b.dir)
}

func (b *Bouncer) kill() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-b.done
	}
}
