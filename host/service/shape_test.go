package service_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/audit"
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/catalog"
	"github.com/ffscan/ffscan/host/census"
	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/completions"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/keyevents"
	"github.com/ffscan/ffscan/host/lanes"
	"github.com/ffscan/ffscan/host/launcher"
	"github.com/ffscan/ffscan/host/libwatch"
	"github.com/ffscan/ffscan/host/listeners"
	"github.com/ffscan/ffscan/host/scheduler"
	"github.com/ffscan/ffscan/host/service"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/host/supervisor"
	"github.com/ffscan/ffscan/host/unit"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// shape is one service of the host, as its package declares it.
type shape struct {
	dir     string // the package's directory, from host/service
	service string // the service's type
	config  string // its Config type
}

// services are every service the host starts (host/services.go).
var services = []shape{
	{"../supervisor", "Supervisor", "Config"},
	{"../scheduler", "Runner", "Config"},
	{"../unit", "Set", "Config"},
	{"../sharing", "Coordinator", "Config"},
	{"../listeners", "Listeners", "Config"},
	{"../completions", "Listener", "Config"},
	{"../pgcompletions", "Listener", "Config"},
	{"../keyevents", "Feed", "Config"},
	{"../lanes", "Keeper", "KeeperConfig"},
	{"../census", "Controller", "ControllerConfig"},
	{"../libwatch", "Watch", "Config"},
	{"../filewatch", "Watcher", "Config"},
	{"../httpapi", "Server", "ServerConfig"},
	{"../audit", "Recorder", "Config"},
}

// Every service has the one shape, as its source declares it: a Config
// with a withDefaults method and a Clock of host/clock (its own field or
// an embedded struct's), Start and Stop, and its lifecycle on a
// service.Loop.
func TestEveryServiceHasTheShape(t *testing.T) {
	t.Parallel()
	for _, s := range services {
		t.Run(filepath.Base(s.dir)+"."+s.service, func(t *testing.T) {
			t.Parallel()
			pkg := parseDir(t, s.dir)
			cfg, ok := pkg.structs[s.config]
			require.True(t, ok, "type %s is a struct", s.config)
			assert.True(t, pkg.methods[s.config]["withDefaults"], "%s has a withDefaults method", s.config)
			assert.True(t, pkg.hasField(cfg, "Clock", "clock.Clock"), "%s has Clock clock.Clock", s.config)
			svc, ok := pkg.structs[s.service]
			require.True(t, ok, "type %s is a struct", s.service)
			assert.True(t, pkg.methods[s.service]["Start"], "%s has Start", s.service)
			assert.True(t, pkg.methods[s.service]["Stop"], "%s has Stop", s.service)
			assert.True(t, pkg.hasFieldOfType(svc, "service.Loop"), "%s runs on a service.Loop", s.service)
		})
	}
}

// The list above is every service of the host: each type of a package
// under host/ with Start(context.Context) error and Stop(context.Context)
// error is on it, so a new service is held to the shape as it is
// written. (host/service's own helpers are not services.)
func TestServicesListsEveryService(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, s := range services {
		listed[strings.TrimPrefix(s.dir, "../")+"."+s.service] = true
	}
	found := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if path == filepath.Join("..", "service") {
			return nil
		}
		for _, typ := range lifecycleTypes(t, path) {
			rel, err := filepath.Rel("..", path)
			require.NoError(t, err)
			found[filepath.ToSlash(rel)+"."+typ] = true
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, listed, found, "the services the shape test lists, and those host/ declares")
}

// lifecycleTypes are the types of dir's package (its non-test files)
// with both Start(context.Context) error and Stop(context.Context) error.
func lifecycleTypes(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	has := map[string]map[string]bool{} // type -> Start, Stop
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 || (fd.Name.Name != "Start" && fd.Name.Name != "Stop") || !isLifecycle(fd.Type) {
				continue
			}
			recv := strings.TrimPrefix(exprString(fd.Recv.List[0].Type), "*")
			if has[recv] == nil {
				has[recv] = map[string]bool{}
			}
			has[recv][fd.Name.Name] = true
		}
	}
	var out []string
	for typ, m := range has {
		if m["Start"] && m["Stop"] {
			out = append(out, typ)
		}
	}
	return out
}

// isLifecycle reports whether ft is func(context.Context) error.
func isLifecycle(ft *ast.FuncType) bool {
	params, results := ft.Params.List, ft.Results
	if len(params) != 1 || len(params[0].Names) > 1 || exprString(params[0].Type) != "context.Context" {
		return false
	}
	return results != nil && len(results.List) == 1 && len(results.List[0].Names) <= 1 && exprString(results.List[0].Type) == "error"
}

// Every service behaves as the shape says, on real servers: Stop before
// Start is fine, a second Start is refused with ErrStarted, Stop twice is
// fine. (The Postgres completion listener needs a database; its own tests
// run it.)
func TestEveryServiceStartsOnceAndStops(t *testing.T) {
	t.Parallel()
	srv := testserver.New(t)
	client := srv.Client(t)
	lib := lua.New(client, lua.Options{})
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	parts := keys.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}
	cat, err := catalog.New(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cat.Close() })
	// A launcher of a binary the (empty) plugin directory lacks: the
	// supervisor keeps trying on its clock.
	launch := launcher.New(launcher.Config{Scanner: "none", Binary: "none"}, cat, callbacks.New(lib, nil), hclog.NewNullLogger())
	sup := supervisor.New(supervisor.Config{Name: "none", Launcher: launch, Clock: clk})

	for name, svc := range map[string]service.Service{
		"supervisor":  sup,
		"scheduler":   scheduler.New(scheduler.Config{Name: "none", Client: client, Target: sup, Partitions: parts, Clock: clk}),
		"unit":        unit.NewSet(unit.Config{Deps: unit.Deps{Client: client, Partitions: parts, Clock: clk}}),
		"sharing":     sharing.New(sharing.NewValkeyStore(client), sharing.Config{ID: "shape", Partitions: parts, Clock: clk}),
		"listeners":   listeners.New(listeners.Config{Settings: listeners.Settings{Enabled: true}, Library: lib, Partitions: parts, Clock: clk}),
		"completions": completions.New(completions.Config{Enabled: true, Library: lib, Partitions: parts, Clock: clk}),
		"keyevents":   keyevents.New(client, keyevents.Config{Clock: clk}),
		"lanes":       lanes.NewKeeper(client, lanes.KeeperConfig{Clock: clk}),
		"census":      census.NewController(census.New(client, func() uint64 { return 0 }), client, census.ControllerConfig{Clock: clk}),
		"libwatch":    libwatch.New(lib, libwatch.Config{Clock: clk}),
		"filewatch":   filewatch.New(filewatch.Config{Clock: clk}),
		"httpapi":     httpapi.NewServer(httpapi.ServerConfig{Listen: "127.0.0.1:0", Clock: clk}, prometheus.NewRegistry(), nil),
		"audit":       audit.New(client, audit.Config{Partitions: parts, Clock: clk}),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, svc.Stop(ctx), "%s: Stop before Start", name)
		require.NoError(t, svc.Start(ctx), "%s: Start", name)
		assert.ErrorIs(t, svc.Start(ctx), service.ErrStarted, "%s: a second Start", name)
		assert.NoError(t, svc.Stop(ctx), "%s: Stop", name)
		assert.NoError(t, svc.Stop(ctx), "%s: a second Stop", name)
		cancel()
	}
}

// pkg is what a package's non-test files declare.
type pkg struct {
	structs map[string]*ast.StructType
	methods map[string]map[string]bool // type -> method names
}

func parseDir(t *testing.T, dir string) pkg {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	p := pkg{structs: map[string]*ast.StructType{}, methods: map[string]map[string]bool{}}
	fset := token.NewFileSet()
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					continue
				}
				recv := exprString(d.Recv.List[0].Type)
				recv = strings.TrimPrefix(recv, "*")
				if p.methods[recv] == nil {
					p.methods[recv] = map[string]bool{}
				}
				p.methods[recv][d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						if st, ok := ts.Type.(*ast.StructType); ok {
							p.structs[ts.Name.Name] = st
						}
					}
				}
			}
		}
	}
	require.NotEmpty(t, p.structs, "%s declares types", dir)
	return p
}

// hasField reports whether st has a field name of type typ, itself or
// through a struct of the package it embeds.
func (p pkg) hasField(st *ast.StructType, name, typ string) bool {
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			if inner, ok := p.structs[exprString(f.Type)]; ok && p.hasField(inner, name, typ) {
				return true
			}
		}
		for _, n := range f.Names {
			if n.Name == name && exprString(f.Type) == typ {
				return true
			}
		}
	}
	return false
}

// hasFieldOfType reports whether st has a field of type typ.
func (p pkg) hasFieldOfType(st *ast.StructType, typ string) bool {
	for _, f := range st.Fields.List {
		if exprString(f.Type) == typ {
			return true
		}
	}
	return false
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return "*" + exprString(x.X)
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	}
	return ""
}
