// Package plugins_test checks that every list of the scanners shipped
// with ffscan names each of them: a new scanner (or plugin directory)
// that one of them misses fails here instead of going unconfigured,
// unrun by `make run` or undocumented.
package plugins_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/plugins/budget"
	"github.com/ffscan/ffscan/plugins/cancelreconciler"
	"github.com/ffscan/ffscan/plugins/depreconciler"
	"github.com/ffscan/ffscan/plugins/edgecancel"
	"github.com/ffscan/ffscan/plugins/leaseexpiry"
	"github.com/ffscan/ffscan/plugins/observers"
	"github.com/ffscan/ffscan/plugins/pgreconcilers"
	"github.com/ffscan/ffscan/plugins/quota"
	"github.com/ffscan/ffscan/plugins/retention"
	"github.com/ffscan/ffscan/plugins/timers"
	"github.com/ffscan/ffscan/plugins/unblock"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// bundled is what each plugin directory's main serves (its
// cmd/<dir>/main.go): the one list the others are checked against.
func bundled() map[string][]scannerapi.Scanner {
	var pg []scannerapi.Scanner
	for _, r := range pgreconcilers.All() {
		pg = append(pg, r)
	}
	return map[string][]scannerapi.Scanner{
		"budget":           {budget.NewReset(), budget.NewReconciler()},
		"cancelreconciler": {cancelreconciler.New()},
		"depreconciler":    {depreconciler.New()},
		"edgecancel":       {edgecancel.NewDispatcher(), edgecancel.NewReconciler()},
		"leaseexpiry":      {leaseexpiry.New()},
		"observers":        {observers.NewFlowProjector(), observers.NewIndexReconciler()},
		"pgreconcilers":    pg,
		"quota":            {quota.New()},
		"retention":        {retention.New()},
		"timers": {timers.NewAttemptTimeout(), timers.NewExecutionDeadline(), timers.NewSuspensionTimeout(),
			timers.NewPendingWPExpiry(), timers.NewDelayedPromoter()},
		"unblock": {unblock.New()},
	}
}

// scanners are the bundled scanners' names by the store they work on,
// and the directory (binary) of each.
func scanners(t *testing.T) (valkey, postgres []string, binary map[string]string) {
	binary = map[string]string{}
	for dir, ss := range bundled() {
		for _, s := range ss {
			in := s.Info()
			require.NotContains(t, binary, in.Name, "two plugins serve %s", in.Name)
			binary[in.Name] = dir
			if in.UsesPostgres() {
				postgres = append(postgres, in.Name)
			} else {
				valkey = append(valkey, in.Name)
			}
		}
	}
	sort.Strings(valkey)
	sort.Strings(postgres)
	return valkey, postgres, binary
}

// Every directory under plugins/ with a main is in bundled, and nothing
// else is.
func TestEveryPluginDirectoryIsBundled(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(e.Name(), "cmd", e.Name(), "main.go")); err == nil {
			dirs = append(dirs, e.Name())
		} else {
			t.Errorf("plugins/%s has no main at plugins/%[1]s/cmd/%[1]s/main.go", e.Name())
		}
	}
	var listed []string
	for dir := range bundled() {
		listed = append(listed, dir)
	}
	sort.Strings(listed)
	assert.Equal(t, dirs, listed, "the plugin directories and bundled() in plugins/bundled_test.go")
}

// The shipped configurations: configs/ffscan.yaml (every option),
// dev.yaml, cluster.yaml and demo.yaml (what `make run` runs, and what
// scripts/check-run.sh expects running) enable every Valkey scanner;
// demo-postgres.yaml every Postgres one. A plugin named in ffscan.yaml is
// the scanner's own binary. (bench/cmd/ffbench's idleall list is checked
// against these configurations by its own test; host/shadow_all_test.go's
// against ffscan.yaml.)
func TestConfigurationsEnableEveryScanner(t *testing.T) {
	t.Parallel()
	valkey, postgres, binary := scanners(t)
	for file, want := range map[string][]string{
		"ffscan.yaml": valkey, "dev.yaml": valkey, "cluster.yaml": valkey, "demo.yaml": valkey,
		"demo-postgres.yaml": postgres,
	} {
		cfg, err := config.Load(config.Sources{File: filepath.Join("..", "configs", file), Environ: []string{}})
		require.NoError(t, err, file)
		var enabled []string
		for name, s := range cfg.Scanners {
			if s.Enabled {
				enabled = append(enabled, name)
			}
			if s.Plugin != "" && binary[name] != "" {
				assert.Equal(t, binary[name], s.Plugin, "configs/%s: scanners.%s.plugin", file, name)
			}
		}
		sort.Strings(enabled)
		assert.Equal(t, want, enabled, "configs/%s", file)
	}
}

// README's table of scanners (and its list of the Postgres reconcilers)
// names every scanner, and every Valkey scanner's row its binary.
func TestReadmeNamesEveryScanner(t *testing.T) {
	t.Parallel()
	valkey, postgres, binary := scanners(t)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	for _, name := range postgres {
		assert.Contains(t, string(readme), "`"+name+"`", "README.md names %s", name)
	}
	for _, name := range valkey {
		row := regexp.MustCompile("(?m)^\\| [^|]*`" + regexp.QuoteMeta(name) + "`[^|]*\\| `" + regexp.QuoteMeta(binary[name]) + "` \\|")
		assert.Regexp(t, row, string(readme), "README.md's table of scanners has a row for %s, binary %s", name, binary[name])
	}
}

// bench/cmd/ffbench's lanes benchmark runs the scanners whose sources are
// lane scoped (a key with {lane}): its laneScanners, read from the
// benchmark's source, are exactly those.
func TestLaneBenchmarkRunsEveryLaneScopedScanner(t *testing.T) {
	t.Parallel()
	var want []string
	for _, ss := range bundled() {
		for _, s := range ss {
			in := s.Info()
			for _, src := range in.Sources {
				if strings.Contains(src.Key, "{lane}") {
					want = append(want, in.Name)
					break
				}
			}
		}
	}
	sort.Strings(want)
	got := stringsOfVar(t, filepath.Join("..", "bench", "cmd", "ffbench", "lanes.go"), "laneScanners")
	sort.Strings(got)
	assert.Equal(t, want, got, "laneScanners in bench/cmd/ffbench/lanes.go")
}

// stringsOfVar returns the string literals of the package-level variable
// name declared in file.
func stringsOfVar(t *testing.T, file, name string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	require.NoError(t, err)
	var out []string
	found := false
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if n.Name != name || i >= len(vs.Values) {
					continue
				}
				found = true
				ast.Inspect(vs.Values[i], func(n ast.Node) bool {
					if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						require.NoError(t, err)
						out = append(out, v)
					}
					return true
				})
			}
		}
	}
	require.True(t, found, "%s declares no variable %s", file, name)
	return out
}
