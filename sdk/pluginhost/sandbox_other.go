//go:build !linux

package pluginhost

import (
	"errors"
	"os/exec"
)

// sandboxSpec: nothing is enforced here.
type sandboxSpec struct {
	ReadOnly, ReadWrite []string
	Connect             bool
	Memory              int64
	Cgroups             []string
}

func startConfined(cmd *exec.Cmd, mode Isolation, _ sandboxSpec) (string, error) {
	if mode == IsolationRequired {
		return "", errors.New("isolation is required but only Linux (Landlock) offers it")
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	return "none (only Linux offers isolation)", nil
}

func makeNonDumpable() error { return nil }
