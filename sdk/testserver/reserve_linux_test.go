package testserver

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// childReserveEnv makes this test binary, run as a child, try to reserve
// the port it names, report the result on stdout and hold the
// reservation until its stdin closes.
const childReserveEnv = "FFSCAN_TESTSERVER_CHILD_RESERVE"

func TestMain(m *testing.M) {
	if v := os.Getenv(childReserveEnv); v != "" {
		os.Exit(childReserve(v))
	}
	os.Exit(m.Run())
}

func childReserve(v string) int {
	p, err := strconv.Atoi(v)
	if err != nil {
		fmt.Println("bad port", v)
		return 2
	}
	fmt.Println("reserved", reservePort(p))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// otherProcess is a second test process on the machine, asked to reserve
// port p. It keeps what it got until stop is called.
func otherProcess(t *testing.T, p int) (got bool, stop func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childReserveEnv+"="+strconv.Itoa(p))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() { _ = in.Close(); _ = cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		t.Fatalf("child: %v", err)
	}
	switch strings.TrimSpace(line) {
	case "reserved true":
		return true, stop
	case "reserved false":
		return false, stop
	}
	stop()
	t.Fatalf("child said %q", line)
	return false, nil
}

// Two test binaries side by side once drew the same port, and the one
// that listened second failed. A port drawn here is now refused to every
// other test process while this one lives, and to this one a second
// time; a process's reservations end with it.
func TestADrawnPortIsReservedToItsProcess(t *testing.T) {
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	got, stop := otherProcess(t, p)
	stop()
	if got {
		t.Fatalf("another process reserved port %d, which this one drew", p)
	}
	if reservePort(p) {
		t.Fatalf("this process reserved port %d a second time", p)
	}

	// A port the other process holds is refused here, and free again
	// once that process has exited. Other test processes on the machine
	// may hold ports near p: the other process takes the first it can.
	q := p
	for {
		q++
		if q > p+100 {
			t.Fatalf("no port in %d..%d could be reserved by another process", p+1, p+100)
		}
		if !portUnreservedHere(q) {
			continue
		}
		if got, stop = otherProcess(t, q); got {
			break
		}
		stop()
	}
	if reservePort(q) {
		stop()
		t.Fatalf("this process reserved port %d, which another process holds", q)
	}
	stop()
	if !reservePort(q) {
		t.Fatalf("port %d stayed reserved after the process holding it exited", q)
	}
}

func portUnreservedHere(p int) bool {
	reservedMu.Lock()
	defer reservedMu.Unlock()
	_, ok := reserved[p]
	return !ok
}
