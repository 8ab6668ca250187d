//go:build !linux

package pluginhost

import "errors"

// CgroupOptions say where OpenCgroups makes its groups (Linux only).
type CgroupOptions struct {
	Parent string
}

// Cgroups: control groups are Linux's; elsewhere OpenCgroups fails and
// plugins are bounded by what the system offers.
type Cgroups struct{}

// OpenCgroups fails: there are no control groups on this system.
func OpenCgroups(CgroupOptions) (*Cgroups, error) {
	return nil, errors.New("cgroups: only on Linux")
}

// Kind says which control groups bound the plugins.
func (c *Cgroups) Kind() string { return "" }

// Close does nothing.
func (c *Cgroups) Close() error { return nil }

type cgroup struct{ limits Limits }

func (c *Cgroups) newGroup(Limits) (*cgroup, error) { return nil, errors.New("cgroups: only on Linux") }
func (g *cgroup) procsFiles() []string              { return nil }
func (g *cgroup) usage() Usage                      { return Usage{} }
func (g *cgroup) remove()                           {}
func joinCgroups([]string, int) error               { return nil }
