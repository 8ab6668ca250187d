package hostile

// The attacks on the host's process and the machine outside the plugin's
// socket directory: signals and ptrace to the host's threads, connect()
// to unix sockets the host did not hand the plugin, and syscalls a Go
// plugin has no use for. Each outcome says whether it got through
// (reached) or how it was refused.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// maxThreadScan bounds the thread ids tried on the host: the host's
// threads have ids between its pid and the plugin's (it made them before
// it started the plugin, or it made them later, above the plugin's pid:
// the scan goes that far past it too).
const maxThreadScan = 20_000

// hostThreads are the thread ids to try on the host (pid ppid): from its
// pid up to past the plugin's own.
func hostThreads(ppid int) []int {
	self := os.Getpid()
	end := max(self, ppid) + 2_000
	var out []int
	for tid := ppid; tid < end && len(out) < maxThreadScan; tid++ {
		if tid != self {
			out = append(out, tid)
		}
	}
	return out
}

// threadTally is one attack over many threads: how many it reached, and
// how many answered what.
type threadTally struct {
	reached int
	errs    map[string]int
}

func (t *threadTally) note(err error) {
	if err == nil {
		t.reached++
		return
	}
	if t.errs == nil {
		t.errs = map[string]int{}
	}
	t.errs[err.Error()]++
}

func (t *threadTally) outcome(what string) error {
	if t.reached > 0 {
		return reached{fmt.Sprintf("%s reached %d host threads", what, t.reached)}
	}
	var parts []string
	for e, n := range t.errs {
		parts = append(parts, fmt.Sprintf("%d %s", n, e))
	}
	sort.Strings(parts) // a stable outcome
	return fmt.Errorf("%s reached no host thread: %s", what, strings.Join(parts, ", "))
}

// signalHost sends sig to every thread of the host (the plugin's parent)
// it finds. ESRCH (no such thread in the host) does not count.
func signalHost(sig unix.Signal) error {
	ppid := os.Getppid()
	var t threadTally
	for _, tid := range hostThreads(ppid) {
		err := unix.Tgkill(ppid, tid, sig)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		t.note(err)
	}
	return t.outcome(fmt.Sprintf("signal %d", sig))
}

// ptraceHost tries PTRACE_SEIZE on every thread of the host; one it
// seized it lets go at once.
func ptraceHost() error {
	ppid := os.Getppid()
	var t threadTally
	for _, tid := range hostThreads(ppid) {
		if unix.Tgkill(ppid, tid, 0) == unix.ESRCH {
			continue // not a thread of the host
		}
		_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, 0, 0, 0)
		if e == 0 {
			_, _, _ = unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, 0, 0, 0)
			t.note(nil)
			continue
		}
		t.note(os.NewSyscallError("ptrace", e))
	}
	return t.outcome("PTRACE_SEIZE")
}

// connectUnix connects to a unix socket (a name starting with @ is
// abstract) and says something: an answer or an accepted write means it
// got through.
func connectUnix(addr string) error {
	conn, err := net.DialTimeout("unix", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("from the plugin\n")); err != nil {
		return err
	}
	return reached{"connected to " + addr + " and wrote to it"}
}

// forbiddenSyscall makes one syscall a Go plugin has no use for, with
// arguments that would do no harm if it went through.
func forbiddenSyscall(name string) error {
	var e unix.Errno
	switch name {
	case "ptrace":
		_, _, e = unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getppid()), 0, 0, 0, 0)
	case "keyctl":
		session := int32(unix.KEY_SPEC_SESSION_KEYRING)
		_, _, e = unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(session), 0)
	case "bpf":
		_, _, e = unix.RawSyscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0)
	case "unshare":
		_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
	case "userfaultfd":
		_, _, e = unix.RawSyscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	case "memfd_create":
		fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
			return reached{"a memfd"}
		}
		return os.NewSyscallError(name, err)
	case "sharedmem":
		// A shared anonymous mapping: memory RLIMIT_DATA does not count.
		b, err := unix.Mmap(-1, 0, 64<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err == nil {
			unix.Munmap(b)
			return reached{"a shared mapping of 64 MiB"}
		}
		return os.NewSyscallError("mmap", err)
	case "process_vm_readv":
		_, _, e = unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(os.Getppid()), 0, 0, 0, 0, 0)
	default:
		return fmt.Errorf("unknown syscall %q", name)
	}
	if e == 0 {
		return reached{name + " went through"}
	}
	return os.NewSyscallError(name, e)
}

// startupOutcome is what the attacks on the host's threads did while the
// host read this plugin's Info at start-up (StartupAttack).
var startupOutcome struct {
	sync.Mutex
	text string
}

// StartupAttack attacks the host's threads the moment the plugin starts,
// while its host waits for the handshake and reads its Info (the old
// launcher's thread was in the plugin's Landlock domain then): signal 0,
// SIGSTOP and PTRACE_SEIZE to every thread. The outcomes are kept for
// the "startup" attack and the scanner's Info (option "startup").
func StartupAttack() {
	var parts []string
	for _, f := range []func() error{
		func() error { return signalHost(0) },
		func() error { return signalHost(unix.SIGSTOP) },
		ptraceHost,
	} {
		if err := f(); err != nil {
			parts = append(parts, err.Error())
		}
	}
	startupOutcome.Lock()
	startupOutcome.text = strings.Join(parts, "; ")
	startupOutcome.Unlock()
}

func startupText() string {
	startupOutcome.Lock()
	defer startupOutcome.Unlock()
	return startupOutcome.text
}

// escape runs the attacks of this file by name; ok false for another
// name.
func escape(name, arg string) (err error, ok bool) {
	switch name {
	case "signalhost":
		// signalhost SIG: SIG to every thread of the host.
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err, true
		}
		return signalHost(unix.Signal(n)), true
	case "ptracehost":
		return ptraceHost(), true
	case "connect":
		// connect PATH (or @NAME, abstract)
		return connectUnix(arg), true
	case "syscall":
		return forbiddenSyscall(arg), true
	case "startup":
		return errors.New("at start-up: " + startupText()), true
	case "spin":
		// spin N: N goroutines on the CPU for the plugin's lifetime.
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err, true
		}
		for range n {
			go spin()
		}
		return reached{fmt.Sprintf("spinning in %d goroutines", n)}, true
	case "threads":
		// threads N: N more OS threads, each kept (a goroutine locked to
		// it, parked): the reservations of their stacks are address
		// space, not memory.
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err, true
		}
		return holdThreads(n), true
	case "fillmem":
		// fillmem MIB: a file of MIB MiB in the plugin's TMPDIR (its
		// socket directory), kept: on a tmpfs that is memory no
		// RLIMIT_DATA counts.
		n, err := strconv.Atoi(arg)
		if err != nil {
			return err, true
		}
		return fillFile(n), true
	}
	return nil, false
}

// spinCount keeps spin's loop from being optimised away.
var spinCount atomic.Uint64

func spin() {
	for {
		spinCount.Add(1)
	}
}

// parkedThreads holds the threads attack's goroutines parked for good.
var parkedThreads = make(chan struct{})

// holdThreads starts n goroutines, each locked to an OS thread of its
// own (which the runtime starts for it) and parked there, and returns
// once all of them are.
func holdThreads(n int) error {
	var started sync.WaitGroup
	started.Add(n)
	for range n {
		go func() {
			runtime.LockOSThread()
			started.Done()
			<-parkedThreads
		}()
	}
	started.Wait()
	return reached{fmt.Sprintf("holding %d more threads", n)}
}

// fillFile writes a file of mib MiB in the temporary directory.
func fillFile(mib int) error {
	f, err := os.CreateTemp("", "fill-")
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	defer f.Close()
	for i := range mib {
		if _, err := f.Write(chunk); err != nil {
			return fmt.Errorf("after %d MiB: %w", i, err)
		}
	}
	// The file stays: its memory stays held.
	return reached{fmt.Sprintf("holding a file of %d MiB in %s", mib, f.Name())}
}
