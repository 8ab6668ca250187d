package scannertest

import (
	"testing"

	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Scenario is a World with what a test that builds its own scan requests
// keeps beside it: a Counter on the World's callbacks, for the scanner it
// runs (Mode.Scanner, pluginhost.Linked) and what that scanner sent, and
// the cycle its next request carries.
//
//	f := scannertest.StartScenario(t, client.Options{})
//	s := pluginhost.Linked(mine.New(), f.Counter)
//	res := f.Scan(s, &scannerapi.ScanRequest{Cycle: f.NextCycle(), ...})
type Scenario struct {
	*World
	Counter *Counter
	cycle   uint64
}

// StartScenario is a Scenario on StartWorld's World: a server of the
// test's own.
func StartScenario(t testing.TB, o client.Options) *Scenario {
	t.Helper()
	w := StartWorld(t, o)
	return &Scenario{World: w, Counter: NewCounter(Callbacks(w.Valkey))}
}

// NextCycle returns the cycle of the next request: 1, then 2, and so on,
// as a host numbers its cycles.
func (s *Scenario) NextCycle() uint64 {
	s.cycle++
	return s.cycle
}

// Scan runs one ScanPartition of sc (a linked or launched scanner: a nil
// Host is its callbacks) and fails the test on an error.
func (s *Scenario) Scan(sc scannerapi.Scanner, req *scannerapi.ScanRequest) *scannerapi.ScanResult {
	s.T.Helper()
	res, err := sc.ScanPartition(s.Ctx, nil, req)
	if err != nil {
		s.T.Fatalf("scannertest: scan: %v", err)
	}
	return res
}
