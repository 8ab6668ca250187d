package depguard

import (
	"bytes"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestNoExportedMutableState fails on an exported package-level variable
// in any of the SDK's packages: whoever links the SDK could change it
// under every other user in the process (an allow-list widened, a
// default or a scope's placeholder rewritten). Such state is unexported,
// behind a function that returns a copy or answers a lookup, or a
// constant. Sentinel errors (interface values, compared by identity) are
// not state; nor are the service descriptions protoc generates in
// sdk/internal/pb, which only the SDK's own packages can import.
//
// It reads the packages' compiled export data (go list -export), so the
// types are the compiler's, var x = f() included.
func TestNoExportedMutableState(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}|{{.Export}}|{{with .Module}}{{.Path}}{{end}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	var sdk []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		exports[f[0]] = f[1]
		if f[2] == "github.com/ffscan/ffscan/sdk" {
			sdk = append(sdk, f[0])
		}
	}
	if len(sdk) < 10 {
		t.Fatalf("go list named %d SDK packages: %v", len(sdk), sdk)
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	sort.Strings(sdk)
	for _, path := range sdk {
		if exports[path] == "" {
			continue // a main package or one without Go files
		}
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		for _, name := range pkg.Scope().Names() {
			v, ok := pkg.Scope().Lookup(name).(*types.Var)
			if !ok || !v.Exported() {
				continue
			}
			if _, ok := v.Type().Underlying().(*types.Interface); ok || generated[path] {
				continue
			}
			t.Errorf("%s.%s is exported mutable state (%s): unexport it, or hand out a copy or a lookup", path, name, v.Type())
		}
	}
}

// generated are the packages of generated code the check leaves alone.
var generated = map[string]bool{"github.com/ffscan/ffscan/sdk/internal/pb": true}
