// Package pgtest starts real PostgreSQL servers for tests: initdb into a
// temporary directory, then postgres on a free loopback port with its unix
// socket in the same directory, stopped and removed when the test ends.
//
// PostgreSQL refuses to run as root; under root (CI containers) both run
// as the "postgres" user the Debian package creates, in a directory that
// user owns. The binaries are found in $FFSCAN_TEST_PG_BIN, on PATH, or in
// Debian's /usr/lib/postgresql/<version>/bin (the newest).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffscan/ffscan/sdk/testserver"
	"github.com/jackc/pgx/v5"
)

// Server is one running PostgreSQL.
type Server struct {
	// DSN connects as the superuser to the "postgres" database over TCP
	// on loopback.
	DSN  string
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// ErrNoPostgres says no PostgreSQL binaries were found.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL found (install Debian's postgresql, put initdb on PATH, or set FFSCAN_TEST_PG_BIN)")

// BinDir finds the directory holding initdb and postgres.
func BinDir() (string, error) {
	if d := os.Getenv("FFSCAN_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// New starts a server for one test and stops it when the test ends. It
// skips the test, saying why, when no PostgreSQL is installed, unless
// $FFSCAN_TEST_REQUIRE_POSTGRES is set (CI sets it: there a missing
// PostgreSQL is a failure, not a skip).
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if errors.Is(err, ErrNoPostgres) && os.Getenv("FFSCAN_TEST_REQUIRE_POSTGRES") == "" {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start launches a server; the caller stops it.
func Start() (*Server, error) { return StartWith() }

// StartWith is Start with more server settings, each "name=value" (a
// bench that loads pg_stat_statements, say).
func StartWith(settings ...string) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ffscan-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, done: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	cred, err := runAs(dir)
	if err != nil {
		return fail(err)
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgtest: initdb: %v\n%s", err, out))
	}
	// A port the OS just handed out; a rare clash is retried.
	for attempt := 0; ; attempt++ {
		port, err := testserver.FreePort()
		if err != nil {
			return fail(err)
		}
		s.Port = port
		logf, err := os.Create(filepath.Join(dir, "postgres.log"))
		if err != nil {
			return fail(err)
		}
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir, "-c", "fsync=off",
			"-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_locks_per_transaction=256",
			// A Postgres host holds its pool, a connection per candidate
			// function and a listener's: tests run several hosts at once
			// on one server, past the default 100 with more than 2 CPUs.
			"-c", "max_connections=400")
		for _, set := range settings {
			cmd.Args = append(cmd.Args, "-c", set)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return fail(fmt.Errorf("pgtest: start postgres: %w", err))
		}
		logf.Close()
		s.cmd = cmd
		s.done = make(chan struct{})
		go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
		s.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		err = s.waitReady(30 * time.Second)
		if err == nil {
			return s, nil
		}
		s.kill()
		if attempt >= 2 {
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return fail(fmt.Errorf("pgtest: postgres did not come up: %v\n%s", err, log))
		}
	}
}

// waitReady polls with a connection attempt until the server answers,
// the process exits, or limit passes.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.DSN)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

// Stop shuts the server down (fast shutdown, then SIGKILL after 10 s) and
// removes its directory.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.kill()
		}
	}
	os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// runAs returns the credential to run PostgreSQL with: none for an
// ordinary user; under root the "postgres" user, who is then given dir.
func runAs(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and PostgreSQL refuses root: no \"postgres\" user to run it as (%v)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	// The temporary directory's parents must let that user through.
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return nil, err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return nil, fmt.Errorf("pgtest: %s is not searchable by the postgres user; set TMPDIR to a directory it can reach", d)
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// CreateDatabase makes a new empty database and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	return s.createDatabase(ctx, name, "")
}

// dsnOf is the DSN of database name on s.
func (s *Server) dsnOf(name string) string {
	return strings.Replace(s.DSN, "/postgres?", "/"+name+"?", 1)
}

// Pid is the postmaster's process id (benchmarks read the server's CPU
// from it and its children).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// LogPath is the server's log file (its stderr): what log_* settings
// turned on are written there.
func (s *Server) LogPath() string { return filepath.Join(s.dir, "postgres.log") }
