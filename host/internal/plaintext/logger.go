package plaintext

import (
	"github.com/hashicorp/go-hclog"
)

// MaxArgs bounds the key-value arguments of one log line (a plugin's
// relayed log entry brings its own).
const MaxArgs = 64

// Logger wraps l so that every message, name, key and value it writes is
// one line of at most limit bytes (Line, Value), and a line carries at
// most MaxArgs arguments. The loggers it derives (Named, With) do the
// same. go-plugin relays a plugin's stderr through the logger it is
// given: each line, or each field of a JSON log entry, arrives as a
// message or value of a call here.
func Logger(l hclog.Logger, limit int) hclog.Logger {
	if w, ok := l.(*logger); ok && w.limit <= limit {
		return w
	}
	return &logger{Logger: l, limit: limit}
}

type logger struct {
	hclog.Logger
	limit int
}

func (l *logger) args(args []any) []any {
	if len(args) > MaxArgs {
		args = append(args[:MaxArgs:MaxArgs], "args_cut", len(args)-MaxArgs)
	}
	out := make([]any, len(args))
	for i, a := range args {
		if i%2 == 0 {
			if k, ok := a.(string); ok {
				out[i] = Line(k, 64)
				continue
			}
		}
		out[i] = Value(a, l.limit)
	}
	return out
}

func (l *logger) Log(level hclog.Level, msg string, args ...any) {
	l.Logger.Log(level, Line(msg, l.limit), l.args(args)...)
}
func (l *logger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *logger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *logger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *logger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *logger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *logger) With(args ...any) hclog.Logger {
	return &logger{Logger: l.Logger.With(l.args(args)...), limit: l.limit}
}

func (l *logger) Named(name string) hclog.Logger {
	return &logger{Logger: l.Logger.Named(Line(name, 64)), limit: l.limit}
}

func (l *logger) ResetNamed(name string) hclog.Logger {
	return &logger{Logger: l.Logger.ResetNamed(Line(name, 64)), limit: l.limit}
}
