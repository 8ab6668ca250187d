package scannertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// builds caches plugin builds for the life of the test process: building a
// plugin takes seconds, and a package's tests usually want the same binary
// many times (linked-vs-subprocess comparisons, host end-to-end tests).
var builds struct {
	sync.Mutex
	dir   string
	paths map[string]string
	errs  map[string]string
}

// PluginBinary builds the plugin main package pkg once per test process and
// returns the path of that build. Call Cleanup from TestMain, after m.Run,
// to remove the builds.
func PluginBinary(t testing.TB, pkg string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if p, ok := builds.paths[pkg]; ok {
		return p
	}
	if msg, ok := builds.errs[pkg]; ok {
		t.Fatal(msg)
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "scannertest-plugins-")
		if err != nil {
			t.Fatalf("scannertest: %v", err)
		}
		builds.dir = d
		builds.paths = map[string]string{}
		builds.errs = map[string]string{}
	}
	out := filepath.Join(builds.dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		builds.errs[pkg] = "scannertest: go build " + pkg + ": " + err.Error() + "\n" + string(b)
		t.Fatal(builds.errs[pkg])
	}
	builds.paths[pkg] = out
	return out
}

// InstallPlugin puts the PluginBinary of pkg into dir as name, mode 0755, as
// a host's plugin directory expects it, and returns its path.
func InstallPlugin(t testing.TB, pkg, dir, name string) string {
	t.Helper()
	dst := filepath.Join(dir, name)
	copyBinary(t, PluginBinary(t, pkg), dst)
	return dst
}

// Cleanup removes every build PluginBinary made. Call it from TestMain.
func Cleanup() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir, builds.paths, builds.errs = "", nil, nil
	}
}
