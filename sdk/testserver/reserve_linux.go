package testserver

import (
	"net"
	"strconv"
	"sync"
)

var (
	// reserved holds one listening socket per port this process has
	// drawn. Closing one would give its port back to other test
	// processes, so none is closed: the kernel closes them all when the
	// process exits, however it exits.
	reservedMu sync.Mutex
	reserved   = map[int]net.Listener{}
)

// reservePort claims port p for this process among the test processes on
// the machine, and reports whether it got it. The claim is a Unix socket
// bound in Linux's abstract namespace under a name made of the port: only
// one socket can hold a name, the name is gone when its socket is closed
// (at the latest when the process exits), and no file is left behind.
func reservePort(p int) bool {
	reservedMu.Lock()
	defer reservedMu.Unlock()
	if _, ok := reserved[p]; ok {
		return false
	}
	l, err := net.Listen("unix", "@ffscan-test-port-"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	reserved[p] = l
	return true
}
