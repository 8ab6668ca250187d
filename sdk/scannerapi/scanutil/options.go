package scanutil

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// Options are a scanner's options checked against its OptionSpecs, with
// every declared option present (the operator's value or the default).
type Options struct {
	specs  map[string]scannerapi.OptionSpec
	values map[string]string
}

// ParseOptions checks options against specs: an option that is not
// declared, or whose value (or default) does not parse as its type, is an
// error that names it. An empty value means the default.
func ParseOptions(specs []scannerapi.OptionSpec, options map[string]string) (Options, error) {
	o := Options{specs: map[string]scannerapi.OptionSpec{}, values: map[string]string{}}
	for _, s := range specs {
		o.specs[s.Name] = s
	}
	var unknown []string
	for k := range options {
		if _, ok := o.specs[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Options{}, fmt.Errorf("unknown option %q (known: %s)", unknown[0], strings.Join(o.names(), ", "))
	}
	for name, s := range o.specs {
		v, set := options[name]
		if !set || v == "" {
			v = s.Default
		}
		if err := checkType(s.Type, v); err != nil {
			what := "value"
			if !set || options[name] == "" {
				what = "default"
			}
			return Options{}, fmt.Errorf("option %s: %s %q: %v", name, what, v, err)
		}
		o.values[name] = v
	}
	return o, nil
}

func (o Options) names() []string {
	out := make([]string, 0, len(o.specs))
	for n := range o.specs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func checkType(t scannerapi.OptionType, v string) error {
	switch t {
	case scannerapi.OptionInt:
		if v == "" {
			return nil // no default: the scanner decides
		}
		_, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
	case scannerapi.OptionBool:
		if v == "" {
			return nil
		}
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("not a boolean (true or false)")
		}
	case scannerapi.OptionDuration:
		if v == "" {
			return nil
		}
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("not a duration (like 1500ms or 24h)")
		}
	}
	return nil
}

// String returns the value of option name.
func (o Options) String(name string) string { return o.get(name) }

// Int returns the value of int option name, checked to lie in [lo, hi].
func (o Options) Int(name string, lo, hi int) (int, error) {
	v := o.get(name)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("option %s: %q is not an integer", name, v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("option %s: %d is outside [%d, %d]", name, n, lo, hi)
	}
	return n, nil
}

// Duration returns the value of duration option name, checked to be at
// least lo.
func (o Options) Duration(name string, lo time.Duration) (time.Duration, error) {
	v := o.get(name)
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("option %s: %q is not a duration", name, v)
	}
	if d < lo {
		return 0, fmt.Errorf("option %s: %v is below %v", name, d, lo)
	}
	return d, nil
}

// Bool returns the value of bool option name.
func (o Options) Bool(name string) (bool, error) {
	v := o.get(name)
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("option %s: %q is not a boolean", name, v)
	}
	return b, nil
}

// Map returns every option's value (for ParseFilter and logs).
func (o Options) Map() map[string]string {
	out := make(map[string]string, len(o.values))
	for k, v := range o.values {
		out[k] = v
	}
	return out
}

// get panics on an undeclared name: that is a bug in the scanner, not in
// the operator's config.
func (o Options) get(name string) string {
	if _, ok := o.specs[name]; !ok {
		panic(fmt.Sprintf("scanutil: option %q is not declared", name))
	}
	return o.values[name]
}
