package rootgraph

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the package host's directory.
const root = "../.."

// rootOrder is the order of the root's files: a file's functions and
// methods call (or refer to) only those of the files after it, so calls
// go one way (docs/architecture.md, "The root as a table of contents").
// The file watch's reload (watch.go to reload.go) is its action, as
// SIGHUP's is; an admin action that enables or disables a scanner is
// applied as a reload is (admin.go to reload.go).
var rootOrder = []string{
	"boot.go",
	"run.go",
	"shutdown.go",
	"sessions.go",
	"explainer.go",
	"collector.go",
	"pauses.go",
	"status.go",
	"admin.go",
	"services.go",
	"watch.go",
	"canaries.go",
	"reload.go",
	"auditing.go",
	"settings.go",
	"host.go",
}

// The root's files call one another one way: the file-level graph of
// which file's top-level functions and methods refer to which other
// file's has no two-way pair and no cycle, and follows rootOrder, which
// lists every file of the root.
func TestRootCallsGoOneWay(t *testing.T) {
	t.Parallel()
	graph, err := rootCallGraph(root)
	require.NoError(t, err)

	var files []string
	for f := range graph {
		files = append(files, f)
	}
	sort.Strings(files)
	want := slices.Clone(rootOrder)
	sort.Strings(want)
	assert.Equal(t, want, files, "rootOrder lists every non-test file of the root, once")

	for from, tos := range graph {
		for to, calls := range tos {
			if _, back := graph[to][from]; back {
				t.Errorf("two-way pair %s <-> %s: %s, and back %s", from, to, calls, graph[to][from])
			}
			if i, j := slices.Index(rootOrder, from), slices.Index(rootOrder, to); i >= 0 && j >= 0 && i > j {
				t.Errorf("%s calls up into %s (rootOrder puts it above): %s", from, to, calls)
			}
		}
	}
	if cycle := findCycle(graph); cycle != nil {
		t.Errorf("cycle among the root's files: %s", strings.Join(cycle, " -> "))
	}
}

// host/plugindir, the root's plugins.go and resolve.go once, keeps its
// files one way too: the operator commands (plugindir.go) use the
// Resolver (resolve.go), and both inspect binaries (inspect.go).
func TestPlugindirCallsGoOneWay(t *testing.T) {
	t.Parallel()
	graph, err := rootCallGraph(filepath.Join(root, "plugindir"))
	require.NoError(t, err)
	require.Contains(t, graph, "resolve.go")
	for from, tos := range graph {
		for to, calls := range tos {
			if _, back := graph[to][from]; back {
				t.Errorf("two-way pair %s <-> %s: %s, and back %s", from, to, calls, graph[to][from])
			}
		}
	}
	if cycle := findCycle(graph); cycle != nil {
		t.Errorf("cycle among host/plugindir's files: %s", strings.Join(cycle, " -> "))
	}
}

// The root's tables of contents, its package comment (host.go) and
// docs/architecture.md, name every file of the root.
func TestRootTableOfContents(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(root, "host.go"))
	require.NoError(t, err)
	pkgDoc, _, _ := strings.Cut(string(doc), "\npackage host")
	arch, err := os.ReadFile(filepath.Join(root, "..", "docs", "architecture.md"))
	require.NoError(t, err)
	for _, f := range rootOrder {
		assert.Contains(t, pkgDoc, f, "host.go's package comment")
		assert.Contains(t, string(arch), "`"+f+"`", "docs/architecture.md")
	}
}

// The graph sees calls it should: a method call through the receiver, a
// field of a root type, a local built from a composite literal, and a
// plain function; and not a name selected from another package's value
// or package that one of dir's functions also has.
func TestRootCallGraphSeesCalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("package p\n\n"+src), 0o644))
	}
	write("a.go", `type A struct{ b *B }
func (a *A) viaField() { a.b.m() }
func viaLocal() { x := &B{}; x.m() }
func viaResult() { y := newB(); y.m() }
func viaFunc() { f() }
func viaOther(o *other.T) { o.f(); other.f() }
func (a *A) own() {}`)
	write("b.go", `type B struct{}
func (b *B) m() {}
func newB() *B { return &B{} }
func f() {}
func (b *B) up(a *A) { a.own() }`)
	write("b_test.go", `func (b *B) test(a *A) { a.viaField() }`)
	graph, err := rootCallGraph(dir)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"A.viaField -> B.m", "viaFunc -> f", "viaLocal -> B.m", "viaResult -> B.m", "viaResult -> newB"}, graph["a.go"]["b.go"])
	assert.Equal(t, []string{"B.up -> A.own"}, graph["b.go"]["a.go"])
	assert.Equal(t, []string{"a.go", "b.go", "a.go"}, findCycle(graph))
	delete(graph["b.go"], "a.go")
	assert.Nil(t, findCycle(graph))
}

// rootCallGraph parses the non-test files of dir and returns, per file,
// the files whose top-level functions and methods its own refer to, with
// the references ("Host.apply -> Host.check"). A method is told by its
// receiver's type, which is known for the method's receiver, its
// parameters, a variable declared with a type, built from a composite
// literal or returned by a function of dir, and a field of a struct
// declared in dir; a method called on a value of any other type is not
// one of dir's.
func rootCallGraph(dir string) (map[string]map[string][]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	declared := map[string]string{}          // "f" or "T.m" -> file
	results := map[string]string{}           // function or method -> its first result's type
	fields := map[string]map[string]string{} // struct -> field -> type
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(p)
		files[name] = f
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				key := funcKey(d)
				declared[key] = name
				if r := d.Type.Results; r != nil && len(r.List) > 0 {
					results[key] = typeName(r.List[0].Type)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					fs := map[string]string{}
					for _, fl := range st.Fields.List {
						tn := typeName(fl.Type)
						if len(fl.Names) == 0 {
							fs[tn] = tn
						}
						for _, n := range fl.Names {
							fs[n.Name] = tn
						}
					}
					fields[ts.Name.Name] = fs
				}
			}
		}
	}
	graph := map[string]map[string][]string{}
	for name, f := range files {
		graph[name] = map[string][]string{}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			from := funcKey(fd)
			vars := map[string]string{}
			for _, l := range []*ast.FieldList{fd.Recv, fd.Type.Params} {
				if l == nil {
					continue
				}
				for _, p := range l.List {
					for _, n := range p.Names {
						vars[n.Name] = typeName(p.Type)
					}
				}
			}
			var typeOf func(e ast.Expr) string
			typeOf = func(e ast.Expr) string {
				switch x := e.(type) {
				case *ast.Ident:
					return vars[x.Name]
				case *ast.SelectorExpr:
					return fields[typeOf(x.X)][x.Sel.Name]
				case *ast.ParenExpr:
					return typeOf(x.X)
				case *ast.StarExpr:
					return typeOf(x.X)
				case *ast.UnaryExpr:
					return typeOf(x.X)
				case *ast.CompositeLit:
					return typeName(x.Type)
				case *ast.CallExpr:
					switch fn := x.Fun.(type) {
					case *ast.Ident:
						return results[fn.Name]
					case *ast.SelectorExpr:
						return results[typeOf(fn.X)+"."+fn.Sel.Name]
					}
				}
				return ""
			}
			seen := map[string]bool{}
			// sels are the names selected from a value (x.name): a
			// reference to one of dir's only when x's type is dir's,
			// never by the name alone.
			sels := map[*ast.Ident]bool{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				var key string
				switch x := n.(type) {
				case *ast.AssignStmt:
					if x.Tok == token.DEFINE && len(x.Rhs) > 0 {
						if id, ok := x.Lhs[0].(*ast.Ident); ok {
							if tn := typeOf(x.Rhs[0]); tn != "" {
								vars[id.Name] = tn
							}
						}
					}
					return true
				case *ast.ValueSpec:
					for i, id := range x.Names {
						switch {
						case x.Type != nil:
							vars[id.Name] = typeName(x.Type)
						case i < len(x.Values):
							vars[id.Name] = typeOf(x.Values[i])
						}
					}
					return true
				case *ast.Ident:
					if sels[x] {
						return true
					}
					key = x.Name
				case *ast.SelectorExpr:
					sels[x.Sel] = true
					if tn := typeOf(x.X); tn != "" {
						key = tn + "." + x.Sel.Name
					}
				default:
					return true
				}
				to, ok := declared[key]
				if !ok || to == name || seen[key] {
					return true
				}
				seen[key] = true
				graph[name][to] = append(graph[name][to], from+" -> "+key)
				return true
			})
		}
	}
	for _, tos := range graph {
		for _, calls := range tos {
			sort.Strings(calls)
		}
	}
	return graph, nil
}

func funcKey(fd *ast.FuncDecl) string {
	if fd.Recv != nil && len(fd.Recv.List) > 0 {
		return typeName(fd.Recv.List[0].Type) + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// typeName is the name of a type expression's named type (T, *T, T[X]);
// "" for any other.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	}
	return ""
}

// findCycle returns a cycle of the file graph (its files, the first
// repeated at the end), or nil.
func findCycle(graph map[string]map[string][]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(f string) []string
	visit = func(f string) []string {
		state[f] = open
		path = append(path, f)
		var tos []string
		for to := range graph[f] {
			tos = append(tos, to)
		}
		sort.Strings(tos)
		for _, to := range tos {
			switch state[to] {
			case open:
				i := slices.Index(path, to)
				return append(slices.Clone(path[i:]), to)
			case unseen:
				if c := visit(to); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[f] = done
		return nil
	}
	var files []string
	for f := range graph {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if state[f] == unseen {
			if c := visit(f); c != nil {
				return c
			}
		}
	}
	return nil
}
