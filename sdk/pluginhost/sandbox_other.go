//go:build !linux

package pluginhost

import (
	"errors"
	"os/exec"
)

func startConfined(cmd *exec.Cmd, mode Isolation, _, _ []string, _ int64, _ bool) (string, error) {
	if mode == IsolationRequired {
		return "", errors.New("isolation is required but only Linux (Landlock) offers it")
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	return "none (only Linux offers isolation)", nil
}

func makeNonDumpable() error { return nil }
