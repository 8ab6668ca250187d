//go:build !unix

package pluginhost

import (
	"errors"
	"syscall"
)

func pluginProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(pid int) error {
	return errors.New("scannerapi: launching plugins is only supported on unix")
}
