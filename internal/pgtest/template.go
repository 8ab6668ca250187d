package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Template is a database built once per test process, on one server of
// its own, and copied (CREATE DATABASE ... TEMPLATE) for every test that
// asks for one. A schema that takes tens of seconds to create (ffscan's
// 256 partitions of thirteen tables) then costs that once per package
// instead of once per test, and the tests, each on its own copy, can run
// in parallel.
//
// Build the template with NewTemplate at package level and Close it from
// TestMain after m.Run.
type Template struct {
	name  string
	build func(ctx context.Context, dsn string) error

	once sync.Once
	srv  *Server
	err  error

	mu sync.Mutex // copies are made one at a time
	n  int
}

// NewTemplate describes a template database called name, which build
// fills (a schema, fixtures). build must close every connection it opens:
// PostgreSQL copies a database only while nobody is connected to it.
func NewTemplate(name string, build func(ctx context.Context, dsn string) error) *Template {
	return &Template{name: name, build: build}
}

// Database returns the DSN of a new database copied from the template,
// dropped when the test ends. The first call starts the server and builds
// the template. Like New, it skips the test when no PostgreSQL is
// installed, unless $FFSCAN_TEST_REQUIRE_POSTGRES is set.
func (tp *Template) Database(t testing.TB) string {
	t.Helper()
	tp.once.Do(func() { tp.srv, tp.err = tp.start() })
	if errors.Is(tp.err, ErrNoPostgres) && os.Getenv("FFSCAN_TEST_REQUIRE_POSTGRES") == "" {
		t.Skip(tp.err.Error())
	}
	if tp.err != nil {
		t.Fatal(tp.err)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.n++
	name := fmt.Sprintf("%s_%d", tp.name, tp.n)
	ctx := context.Background()
	dsn, err := tp.srv.createDatabase(ctx, name, tp.name)
	if err != nil {
		t.Fatalf("pgtest: copy template %s: %v", tp.name, err)
	}
	t.Cleanup(func() { _ = tp.srv.dropDatabase(context.Background(), name) })
	return dsn
}

// Server is the server holding the template and its copies (nil before
// the first Database): a test can put a pooler in front of it
// (NewBouncer).
func (tp *Template) Server() *Server { return tp.srv }

func (tp *Template) start() (*Server, error) {
	srv, err := Start()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	dsn, err := srv.CreateDatabase(ctx, tp.name)
	if err == nil {
		err = tp.build(ctx, dsn)
	}
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("pgtest: build template %s: %w", tp.name, err)
	}
	return srv, nil
}

// Close stops the template's server, if it was started.
func (tp *Template) Close() {
	if tp.srv != nil {
		tp.srv.Stop()
	}
}

// createDatabase makes database name, a copy of template ("": an empty
// database), and returns its DSN.
func (s *Server) createDatabase(ctx context.Context, name, template string) (string, error) {
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		q += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		return "", err
	}
	return s.dsnOf(name), nil
}

// dropDatabase drops database name, closing its connections.
func (s *Server) dropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}
