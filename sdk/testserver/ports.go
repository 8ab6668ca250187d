package testserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreePort returns a loopback TCP port for a test's own server (or any
// process a test starts to listen on). The port was free when it was
// drawn, and it stays reserved to this test process until the process
// exits: no other test process that draws here gets it, even after this
// one's server has stopped (a test that stops a server and expects its
// port refused never reaches another test's server there).
//
// Without the reservation, two test binaries running side by side could
// both find the same port free, and the one that bound second failed
// ("address already in use"). A process outside the tests can still take
// a drawn port before it is bound; servers started here retry on that.
//
// Ports are drawn below the kernel's ephemeral range, which the kernel
// hands out on its own to every outgoing connection as the source port.
// Only when that range leaves too little room below, or nothing there is
// free, does the kernel pick one.
func FreePort() (int, error) {
	lo, hi := freePortLow, ephemeralLow()
	for range 256 {
		if hi-lo < 1000 {
			break
		}
		p := lo + rand.IntN(hi-lo)
		if !reservePort(p) {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			_ = l.Close()
			return p, nil
		}
		// Held by something else on the machine: keep the reservation, so
		// the port is not drawn again, and draw another.
	}
	for range 16 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("testserver: find a free port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if reservePort(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("testserver: find a free port: every port drawn is reserved by another test process")
}

// freePortLow is the lowest port FreePort draws: above the usual
// services' ports.
const freePortLow = 10000

var (
	ephemeralOnce  sync.Once
	ephemeralFirst int
)

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; its default, 32768, when that cannot be read). It
// is read once per process.
func ephemeralLow() int {
	ephemeralOnce.Do(func() { ephemeralFirst = readEphemeralLow() })
	return ephemeralFirst
}

func readEphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
