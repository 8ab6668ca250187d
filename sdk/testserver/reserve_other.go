//go:build !linux

package testserver

import "sync"

var (
	reservedMu sync.Mutex
	reserved   = map[int]bool{}
)

// reservePort keeps this process from drawing a port twice. Outside
// Linux there is no abstract socket namespace to claim a port among test
// processes without leaving files, so two test processes can still draw
// the same port; servers started here retry when their bind fails.
func reservePort(p int) bool {
	reservedMu.Lock()
	defer reservedMu.Unlock()
	if reserved[p] {
		return false
	}
	reserved[p] = true
	return true
}
