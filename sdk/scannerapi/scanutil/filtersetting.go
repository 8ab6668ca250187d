package scanutil

import (
	"context"
	"sync"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// FilterSetting holds the namespace / instance-tag filter of a scanner
// whose options are the filter's (scannerapi.FilterOptions), safe to
// Configure while scans read it. The zero value keeps everything.
type FilterSetting struct {
	mu sync.Mutex
	f  scannerapi.Filter
}

// Configure validates options against specs (the scanner's
// Info().Options) and, when they are valid, makes their filter the
// current one and logs it; invalid options change nothing.
func (s *FilterSetting) Configure(ctx context.Context, specs []scannerapi.OptionSpec, options map[string]string) error {
	o, err := ParseOptions(specs, options)
	if err != nil {
		return err
	}
	f, err := scannerapi.ParseFilter(o.Map())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.f = f
	s.mu.Unlock()
	scannerapi.Logger(ctx).Info("configured", "filter", f.String())
	return nil
}

// Get returns the current filter.
func (s *FilterSetting) Get() scannerapi.Filter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f
}
