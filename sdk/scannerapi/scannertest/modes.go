package scannertest

import (
	"reflect"
	"testing"

	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Mode is one way to run a scanner in a test that drives ScanPartition
// itself with requests it builds (stale candidates, a window of its
// choice): linked into the test process, or served by the plugin binary.
// Run is the kit's other level, where a real host makes the requests.
type Mode struct {
	// Name is "linked" or "plugin".
	Name string
	// Scanner returns the scanner called name (one binary may serve
	// several) with its callbacks going to cb. The plugin is stopped when
	// the test ends.
	Scanner func(t testing.TB, cb pluginhost.Callbacks, name string) pluginhost.HostScanner
}

// Modes returns the linked mode, whose scanners linked makes, and the
// plugin mode, served by the plugin main package pkg (built once per test
// binary; see PluginBinary).
func Modes(pkg string, linked func(name string) scannerapi.Scanner) []Mode {
	return []Mode{
		{Name: "linked", Scanner: func(t testing.TB, cb pluginhost.Callbacks, name string) pluginhost.HostScanner {
			s := linked(name)
			if s == nil {
				t.Fatalf("scannertest: the linked mode has no scanner %q", name)
			}
			return pluginhost.Linked(s, cb)
		}},
		{Name: "plugin", Scanner: func(t testing.TB, cb pluginhost.Callbacks, name string) pluginhost.HostScanner {
			p := Launch(t, PluginBinary(t, pkg), cb)
			s, ok := p.Scanner(name)
			if !ok {
				t.Fatalf("scannertest: plugin %s serves no scanner %q", pkg, name)
			}
			return s
		}},
	}
}

// Observation is what a scenario saw: each scan's result, with the
// callbacks (Execs) and FCALLs it cost.
type Observation struct {
	Results []*scannerapi.ScanResult
	Execs   []int
	FCalls  []int
}

// Add records a scan's result and what it cost since the counter was last
// reset (and resets it).
func (o *Observation) Add(c *Counter, res *scannerapi.ScanResult) {
	execs, fcalls := c.Reset()
	o.Results = append(o.Results, res)
	o.Execs = append(o.Execs, execs)
	o.FCalls = append(o.FCalls, fcalls)
}

// Agree runs scenario once per mode, each as a subtest, and checks that
// every mode observed the same (results cross the wire normalized, so a
// plugin that behaves like its linked self compares equal).
func Agree[O any](t *testing.T, modes []Mode, scenario func(t *testing.T, m Mode) O) {
	t.Helper()
	got := make([]O, 0, len(modes))
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) { got = append(got, scenario(t, m)) })
	}
	if len(got) != len(modes) {
		return // a subtest failed before returning; it said why
	}
	for i := 1; i < len(got); i++ {
		if !reflect.DeepEqual(got[0], got[i]) {
			t.Errorf("scannertest: modes %s and %s observed differently:\n%s: %+v\n%s: %+v",
				modes[0].Name, modes[i].Name, modes[0].Name, got[0], modes[i].Name, got[i])
		}
	}
}
