// Package pluginhost is the host's side of ffscan's scanner plugins: what
// a program that runs scanners imports, where a scanner author imports
// scannerapi. It launches a plugin binary (Launch, which verifies it,
// starts it in its own process group, optionally confined, completes the
// go-plugin handshake and reads the plugin's scanners), drives its
// scanners over gRPC (Plugin.Scanners implement scannerapi.Scanner), and
// serves their commands: each batch a scanner sends through its
// scannerapi.Host reaches the host's Callbacks, bound to that scanner's
// name and to the call it belongs to. Linked runs a scanner linked into
// the host the same way, so both modes run one code path and report
// identical results.
//
// A plugin binary never links this package: it calls scannerapi.Serve,
// and the two sides share only the wire (the protocol in
// sdk/scannerapi/proto, the handshake and the batch encodings, in
// sdk/internal). The SDK's dependency guard (sdk/internal/depguard) fails
// if scannerapi comes to import this package.
//
// Process hygiene: a launched plugin runs in its own process group, is
// killed as a group (Plugin.Kill, Plugin.Close), gets SIGKILL from the
// kernel when the host dies (Pdeathsig, Linux), and inherits only a
// minimal environment. Isolation confines it further (Landlock, and a
// seccomp filter installed by this package's init when the program runs
// as a plugin's trampoline: see seccomp_linux.go); ProtectHostProcess
// keeps a plugin from reading the host's memory and environment.
package pluginhost
