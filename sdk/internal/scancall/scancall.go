// Package scancall holds what surrounds one call of a scanner method,
// whether the scanner runs in a plugin process (the server behind
// scannerapi.Serve) or linked into a host (pluginhost.Linked): the logger
// the call's context carries, and a panic turned into an error.
package scancall

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
)

type loggerKey struct{}

// WithLogger returns a context that carries l.
func WithLogger(ctx context.Context, l hclog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the logger ctx carries, and whether it carries one.
func Logger(ctx context.Context) (hclog.Logger, bool) {
	l, ok := ctx.Value(loggerKey{}).(hclog.Logger)
	return l, ok && l != nil
}

// Recover turns a panic of a scanner method into an error in *err. Defer
// it directly: defer scancall.Recover(name, "ScanPartition", &err).
func Recover(scanner, method string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("scanner %s: %s panicked: %v\n%s", scanner, method, r, debug.Stack())
	}
}
