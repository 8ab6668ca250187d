// Package wallclock holds an architecture rule of the host as a failing
// test: no code in host/ outside host/clock reads or waits on the wall
// clock directly. Every service that waits, times out or stamps time takes
// a clock.Clock, so that its tests drive time with a clock.Manual instead
// of sleeping. make lint runs it.
package wallclock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// banned are the package time functions that read or wait on the wall
// clock. Durations, time.Time values and their methods are fine.
var banned = map[string]bool{
	"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true,
	"NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true,
}

// hostDir is the host's source: this package is host/internal/wallclock.
func hostDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "clock", "clock.go")); err != nil {
		t.Fatalf("%s is not the host's source: %v", dir, err)
	}
	return dir
}

// offenders lists every use of a banned function in file, as file:line.
func offenders(fset *token.FileSet, file *ast.File, rel string) []string {
	var out []string
	names := map[string]bool{}
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != "time" {
			continue
		}
		switch {
		case imp.Name == nil:
			names["time"] = true
		case imp.Name.Name == ".":
			out = append(out, rel+":"+strconv.Itoa(fset.Position(imp.Pos()).Line)+": a dot import of time hides its wall-clock calls")
		default:
			names[imp.Name.Name] = true
		}
	}
	if len(names) == 0 {
		return out
	}
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && names[x.Name] && banned[sel.Sel.Name] {
			out = append(out, rel+":"+strconv.Itoa(fset.Position(sel.Pos()).Line)+": time."+sel.Sel.Name)
		}
		return true
	})
	return out
}

func TestNoWallClockOutsideHostClock(t *testing.T) {
	root := hostDir(t)
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "clock" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		found = append(found, offenders(fset, file, filepath.Join("host", rel))...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Error(f)
	}
	if len(found) > 0 {
		t.Logf("%d direct wall-clock use(s) in host/ outside host/clock: take a clock.Clock (host/clock) in the service's Config instead", len(found))
	}
}

// The rule catches what it should, and only that.
func TestOffenders(t *testing.T) {
	src := `package p

import (
	"time"
	tm "time"
)

var d = 3 * time.Second
var f = time.Now

func g(t time.Time) time.Duration {
	time.Sleep(d)
	<-tm.After(d)
	return time.Since(t) + t.Sub(t)
}
`
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(offenders(fset, file, "p.go"), "\n")
	want := "p.go:9: time.Now\np.go:12: time.Sleep\np.go:13: time.After\np.go:14: time.Since"
	if got != want {
		t.Errorf("offenders:\n%s\nwant:\n%s", got, want)
	}
}
