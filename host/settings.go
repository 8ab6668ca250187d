package host

// The services' settings in the configuration: how a section of
// config.Config reads as a service's own settings (at boot and at every
// reload).

import (
	"github.com/ffscan/ffscan/host/callbacks"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/filewatch"
	"github.com/ffscan/ffscan/host/listeners"
)

// budgetOf is the callbacks budget the configuration sets.
func budgetOf(c config.Callbacks) callbacks.Budget {
	return callbacks.Budget{MaxInFlight: c.MaxInFlight, CommandsPerSecond: float64(c.CommandsPerSecond), MaxReplyBytes: int64(c.MaxReplyBytes)}
}

// completionSettings are what the configuration says the completion
// listeners run with.
func completionSettings(c config.Completions) listeners.Settings {
	return listeners.Settings{Enabled: c.Enabled, Concurrency: c.Concurrency}
}

// watchSettings are what the configuration says the file watch follows.
func watchSettings(c config.Watch) filewatch.Settings {
	return filewatch.Settings{Config: c.Config, Plugins: c.Plugins, Interval: c.Interval}
}
