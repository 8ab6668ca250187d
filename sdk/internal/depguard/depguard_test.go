package depguard

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxThirdPartyModules is the most modules outside ffscan a plugin
// author's module may build packages from when it uses the SDK, the key
// layout and the test kit (production and test code). The kit linked the
// whole host before (33); the SDK's own API needs 14.
const maxThirdPartyModules = 16

// ffscanModules are the modules a plugin author may depend on. The root
// module (github.com/ffscan/ffscan: host, cmd, plugins, internal) is not
// one of them.
var ffscanModules = []string{
	"github.com/ffscan/ffscan/keys",
	"github.com/ffscan/ffscan/lua",
	"github.com/ffscan/ffscan/sdk",
}

// sdkAllowedModules are the modules the SDK module's packages may build
// on. Adding one is a decision for every plugin author: it goes here on
// purpose, not by accident.
var sdkAllowedModules = append([]string{
	"github.com/valkey-io/valkey-go",
	"github.com/hashicorp/go-plugin",
	"github.com/hashicorp/go-hclog",
	"github.com/hashicorp/yamux",
	"github.com/oklog/run",
	"github.com/fatih/color",
	"github.com/mattn/go-colorable",
	"github.com/mattn/go-isatty",
	"github.com/golang/protobuf",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"google.golang.org/genproto/googleapis/rpc",
	"golang.org/x/net",
	"golang.org/x/sys",
	"golang.org/x/text",
	// The seccomp policy of confined plugins (pluginhost only).
	"github.com/elastic/go-seccomp-bpf",
}, ffscanModules...)

// hostSidePackages are the SDK's packages for programs that run plugins
// (launching, confining and killing plugin processes, serving their
// callbacks). A plugin binary never needs them: the author's package must
// not import them, so a plugin links none of their code or dependencies.
var hostSidePackages = []string{
	"github.com/ffscan/ffscan/sdk/pluginhost",
}

// authorPackages are what a plugin's own code builds on.
var authorPackages = []string{
	"github.com/ffscan/ffscan/sdk/scannerapi",
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil",
}

// repoRoot is the repository's root: this package is sdk/internal/depguard.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"keys", "lua", "sdk"} {
		if _, err := os.Stat(filepath.Join(root, m, "go.mod")); err != nil {
			t.Fatalf("no %s module under %s: %v", m, root, err)
		}
	}
	return root
}

// goList runs go list in dir without the workspace (each module's own
// versions, which this workspace's build need not have fetched: go list
// fetches them from GOPROXY, as on a fresh machine's empty module cache)
// and returns "import path|module path" lines.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}|{{with .Module}}{{.Path}}{{end}}"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// writeThirdParty lays out the throwaway plugin module in a temporary
// directory, pointed at this checkout's SDK, keys and lua modules.
func writeThirdParty(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	var mod strings.Builder
	mod.WriteString("module " + thirdPartyModule + "\n\ngo 1.26.0\n\nrequire (\n")
	for _, m := range ffscanModules {
		mod.WriteString("\t" + m + " v0.0.0\n")
	}
	mod.WriteString(")\n\nreplace (\n")
	for _, m := range ffscanModules {
		mod.WriteString("\t" + m + " => " + filepath.Join(root, strings.TrimPrefix(m, "github.com/ffscan/ffscan/")) + "\n")
	}
	// The root module too, unrequired: should an SDK package come to
	// import it, the build resolves it here and the check below names
	// what it pulled in, rather than failing on a module lookup.
	mod.WriteString("\tgithub.com/ffscan/ffscan => " + root + "\n")
	mod.WriteString(")\n")
	files := map[string]string{"go.mod": mod.String()}
	// The modules' checksums, so the offline build verifies what it takes
	// from the cache.
	var sum []string
	for _, m := range []string{"keys", "lua", "sdk"} {
		b, err := os.ReadFile(filepath.Join(root, m, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		sum = append(sum, strings.Split(string(b), "\n")...)
	}
	files["go.sum"] = strings.Join(uniqueSorted(sum), "\n") + "\n"
	for name, text := range thirdPartyFiles {
		files[name] = text
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A plugin author's module that uses the SDK and the kit builds from few
// third-party modules and from no host or other root-module package.
func TestThirdPartyModuleStaysSmall(t *testing.T) {
	root := repoRoot(t)
	dir := writeThirdParty(t, root)
	lines := goList(t, dir, "-test", "./...")
	if len(lines) < 10 {
		t.Fatalf("go list found only %d packages: %q", len(lines), lines)
	}
	thirdParty := map[string]bool{}
	var rootPkgs []string
	for _, l := range lines {
		pkg, mod, _ := strings.Cut(l, "|")
		switch {
		case mod == "" || mod == thirdPartyModule:
			// the standard library, the module itself
		case mod == "github.com/ffscan/ffscan":
			rootPkgs = append(rootPkgs, pkg)
		case strings.HasPrefix(mod, "github.com/ffscan/ffscan/"):
		default:
			thirdParty[mod] = true
		}
	}
	if len(rootPkgs) > 0 {
		t.Errorf("a plugin module using the SDK builds packages of ffscan's root module (host, internal, ...): %s", strings.Join(uniqueSorted(rootPkgs), ", "))
	}
	mods := keysOf(thirdParty)
	t.Logf("%d third-party modules: %s", len(mods), strings.Join(mods, " "))
	if len(mods) > maxThirdPartyModules {
		t.Errorf("a plugin module using the SDK builds packages from %d third-party modules, more than %d: %s",
			len(mods), maxThirdPartyModules, strings.Join(mods, " "))
	}
}

// The author's packages, and a plugin binary built on them, do not link
// the host's side of plugins.
func TestPluginsDoNotLinkTheHostSide(t *testing.T) {
	root := repoRoot(t)
	hostSide := map[string]bool{}
	for _, p := range hostSidePackages {
		hostSide[p] = true
	}
	check := func(what string, lines []string) {
		t.Helper()
		if len(lines) < 10 {
			t.Fatalf("go list found only %d packages for %s: %q", len(lines), what, lines)
		}
		for _, l := range lines {
			if pkg, _, _ := strings.Cut(l, "|"); hostSide[pkg] {
				t.Errorf("%s builds %s, the host's side of plugins: a plugin must not link it", what, pkg)
			}
		}
	}
	for _, pkg := range authorPackages {
		check(pkg, goList(t, filepath.Join(root, "sdk"), pkg))
	}
	dir := writeThirdParty(t, root)
	lines := goList(t, dir, thirdPartyMain)
	check("a third party's plugin main", lines)
	mods := map[string]bool{}
	for _, l := range lines {
		if _, mod, _ := strings.Cut(l, "|"); mod != "" && !strings.HasPrefix(mod, "github.com/ffscan/ffscan") && mod != thirdPartyModule {
			mods[mod] = true
		}
	}
	t.Logf("a plugin binary builds from %d third-party modules: %s", len(mods), strings.Join(keysOf(mods), " "))
}

// Every package of the SDK module builds only on the allowed modules.
func TestSDKPackagesStayInAllowedModules(t *testing.T) {
	root := repoRoot(t)
	allowed := map[string]bool{}
	for _, m := range sdkAllowedModules {
		allowed[m] = true
	}
	bad := map[string][]string{}
	for _, l := range goList(t, filepath.Join(root, "sdk"), "./...") {
		pkg, mod, _ := strings.Cut(l, "|")
		if mod != "" && !allowed[mod] {
			bad[mod] = append(bad[mod], pkg)
		}
	}
	for _, mod := range keysOf(bad) {
		t.Errorf("SDK packages build on module %s, which is not in the allowed list: %s", mod, strings.Join(bad[mod], ", "))
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func uniqueSorted(ss []string) []string {
	set := map[string]bool{}
	for _, s := range ss {
		if s != "" {
			set[s] = true
		}
	}
	return keysOf(set)
}
