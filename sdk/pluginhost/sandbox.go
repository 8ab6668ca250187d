package pluginhost

// Isolation says how Launch confines a plugin process.
type Isolation int

const (
	// IsolationOff starts the plugin like any child process (the zero
	// value).
	IsolationOff Isolation = iota
	// IsolationAuto confines the plugin with what the kernel offers
	// (Linux Landlock: files, TCP, abstract sockets and signals, by ABI
	// version; a seccomp filter on amd64 and arm64: no new processes, no
	// socket but AF_UNIX) and starts it unconfined when the kernel offers
	// no Landlock; Plugin.Isolation says which happened.
	IsolationAuto
	// IsolationRequired refuses to start the plugin unless at least the
	// filesystem rules and the TCP denial can be enforced.
	IsolationRequired
)

// What a confined plugin may touch: besides these, its own executable
// (read and execute) and the go-plugin socket directory (read and write,
// also its TMPDIR). Everything else in the filesystem is out of reach,
// the host's configuration and environment included, as is the network.
var (
	// sandboxReadOnly are read (and execute) only: the dynamic loader and
	// shared libraries, and what the Go runtime reads of /sys. Not
	// /proc/self: the rules are made in the host, where it names the
	// host's own /proc entry.
	sandboxReadOnly = []string{"/usr", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/localtime",
		"/sys/kernel/mm/transparent_hugepage", "/sys/devices/system/cpu", "/dev/urandom", "/dev/random"}
	// sandboxReadWrite may also be written.
	sandboxReadWrite = []string{"/dev/null"}
)
