package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"
)

// procRunner is our go-plugin runner: go-plugin's own command runner kills
// only the plugin's pid and tells nobody when the process ends, and we need
// both a process-group kill and an exit channel.
type procRunner struct {
	logger hclog.Logger
	cmd    *exec.Cmd
	path   string // the plugin's file (cmd.Path may name the sandbox trampoline)
	stdout io.ReadCloser
	stderr io.ReadCloser

	mu     sync.Mutex
	pid    int
	onExit func() // called once, right before exited is closed
	// isolation confines the process at Start (startConfined) within
	// the paths below; isolated says what was enforced.
	isolation           Isolation
	readOnly, readWrite []string
	// connect lets the confined plugin connect() (older plugins' callback
	// paths, which dial the host's broker).
	connect  bool
	isolated string
	// memoryLimit is LaunchConfig.MemoryLimit: the group's memory bound,
	// or RLIMIT_DATA where there is no group (dataLimit). stderr is
	// watched for the Go runtime running out of memory and for a crash
	// report.
	memoryLimit int64
	watch       *stderrWatch
	// cgroups, when set, puts the process in a group of its own bounded
	// by limits (group, from Start until it exited).
	cgroups *Cgroups
	limits  Limits
	group   *cgroup
	bounds  string
	exited  chan struct{}
	once    sync.Once
	err     error // Wait's result, valid once exited is closed
}

var _ runner.Runner = (*procRunner)(nil)

func newProcRunner(logger hclog.Logger, cmd *exec.Cmd) (*procRunner, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	watch := &stderrWatch{ReadCloser: stderr}
	return &procRunner{logger: logger, cmd: cmd, path: cmd.Path, stdout: stdout, stderr: watch, watch: watch, exited: make(chan struct{})}, nil
}

func (r *procRunner) Start(context.Context) error {
	var err error
	var join []string
	if r.cgroups != nil {
		g, err := r.cgroups.newGroup(r.limits)
		if err != nil {
			r.markExited(err)
			return err
		}
		r.mu.Lock()
		r.group = g
		r.mu.Unlock()
		join = g.procsFiles()
	}
	if r.isolation == IsolationOff {
		err = r.cmd.Start()
	} else {
		var desc string
		desc, err = startConfined(r.cmd, r.isolation, sandboxSpec{ReadOnly: r.readOnly, ReadWrite: r.readWrite,
			Connect: r.connect, Memory: r.dataLimit(), Cgroups: join})
		r.mu.Lock()
		r.isolated = desc
		r.mu.Unlock()
	}
	if err != nil {
		r.markExited(err)
		return err
	}
	if len(join) > 0 && r.cmd.Path != trampolinePath {
		// Unconfined: the trampoline, which joins the group before it
		// execs the plugin, did not run; the plugin joins it now, a few
		// milliseconds into its life.
		if err := joinCgroups(join, r.cmd.Process.Pid); err != nil {
			r.killStarted()
			err = fmt.Errorf("plugin: cannot put it in its control group: %w", err)
			r.markExited(err)
			return err
		}
	}
	if r.dataLimit() > 0 && r.cmd.Path != trampolinePath {
		// The trampoline sets it right before it execs the plugin
		// (not here: the trampoline, the host's own program, may need
		// more); without it this bounds the plugin from its first
		// milliseconds on.
		if err := setMemoryLimit(r.cmd.Process.Pid, r.dataLimit()); err != nil {
			r.killStarted()
			err = fmt.Errorf("plugin: cannot set its memory limit: %w", err)
			r.markExited(err)
			return err
		}
	}
	r.mu.Lock()
	r.pid = r.cmd.Process.Pid
	r.bounds = r.describeBounds()
	r.mu.Unlock()
	r.logger.Debug("plugin started", "path", r.path, "pid", r.pid)
	return nil
}

// dataLimit is the RLIMIT_DATA the plugin runs under: its memory limit
// where no control group bounds it, else none. RLIMIT_DATA counts
// address space, not memory: every thread's stack reservation (8 MiB
// from glibc in a plugin built with cgo) counts in full, so a plugin
// holding 44 MiB under a 128 MiB limit died when its runtime started a
// thread under load ("pthread_create failed: Resource temporarily
// unavailable"). A group's bound counts what the plugin holds, files in
// memory included, and nothing it only reserved.
func (r *procRunner) dataLimit() int64 {
	if r.cgroups != nil {
		return 0
	}
	return r.memoryLimit
}

// killStarted kills a process Start started but will not hand over
// (r.pid is not set yet, so Kill would not reach it) and reaps it.
func (r *procRunner) killStarted() {
	pid := r.cmd.Process.Pid
	_ = killGroup(pid)
	_ = r.cmd.Process.Kill()
	go func() { _ = r.cmd.Wait() }()
}

// Wait is called exactly once by go-plugin, after the stdout and stderr
// pipes reached EOF.
func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.markExited(err)
	return err
}

// describeBounds says what bounds the process's resources.
func (r *procRunner) describeBounds() string {
	if r.group != nil {
		return DescribeBounds(r.cgroups, r.limits)
	}
	return DescribeBounds(nil, r.limits)
}

func (r *procRunner) markExited(err error) {
	r.once.Do(func() {
		if r.group != nil {
			// The process was waited for: its group holds no task.
			if err != nil && r.memoryLimit > 0 && r.group.usage().OOMKills > 0 {
				err = &MemoryLimitError{Limit: r.memoryLimit, Err: err, Cgroup: true}
			}
			r.group.remove()
		}
		if err != nil && r.memoryLimit > 0 && r.watch.seen.Load() {
			err = &MemoryLimitError{Limit: r.memoryLimit, Err: err}
		}
		if line := r.watch.crashLine(); err != nil && line != "" {
			if _, memory := err.(*MemoryLimitError); !memory {
				err = &CrashError{Err: err, Line: line}
			}
		}
		r.err = err
		if r.onExit != nil {
			r.onExit()
		}
		close(r.exited)
	})
}

// Kill SIGKILLs the plugin's whole process group. It does not wait.
func (r *procRunner) Kill(context.Context) error {
	pid := r.Pid()
	if pid == 0 {
		return nil
	}
	err := killGroup(pid)
	// If the group is somehow not ours (it always is: Setpgid), still kill
	// the process itself.
	if perr := r.cmd.Process.Kill(); perr != nil && !errors.Is(perr, os.ErrProcessDone) && err == nil {
		err = perr
	}
	return err
}

func (r *procRunner) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pid
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.path }

func (r *procRunner) ID() string {
	if pid := r.Pid(); pid != 0 {
		return strconv.Itoa(pid)
	}
	return ""
}

func (r *procRunner) Diagnose(context.Context) string {
	return fmt.Sprintf("the plugin %s did not complete the go-plugin handshake: it must be built for this OS and architecture and call scannerapi.Serve from main", r.path)
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
