package main

// ffscan run and ffscan version.

import (
	"context"
	"fmt"
	"github.com/ffscan/ffscan/host/audit"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ffscan/ffscan/host"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func cmdRun(args []string, stderr io.Writer) error {
	fs, c := newFlags("run", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	src := c.sources(fs)
	cfg, err := config.Load(src)
	if err != nil {
		return err
	}
	log := host.NewLogger(cfg.Log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	h, err := host.Boot(bctx, cfg, log)
	cancel()
	if err != nil {
		return err
	}
	defer h.Close()
	// Every reload builds the configuration afresh from the same layers:
	// the file as it is now, the environment, the same flags.
	h.SetConfigSource(host.ConfigSource{Load: func() (*config.Config, error) { return config.Load(src) }, File: src.File})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the configuration")
				if _, err := h.ReloadConfig(audit.WithActor(ctx, audit.Actor{Channel: audit.ChannelSIGHUP}), "SIGHUP"); err != nil {
					log.Error("configuration reload failed", "error", err)
				}
			}
		}
	}()

	// The exit deadline holds even if something below ignores it: a
	// watchdog exits the process at shutdown_timeout after the signal
	// (plugins die with us through Pdeathsig and their parent watch), and
	// a second signal exits at once.
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal kills us
		time.AfterFunc(cfg.ShutdownTimeout, func() {
			log.Error("shutdown timeout exceeded; exiting now")
			os.Exit(exitRuntime)
		})
	}()
	return h.Run(ctx)
}

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlags("version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ffscan %s (scanner API %d, lua library %s, FlowFabric contract %s)\n", host.Version, scannerapi.APIVersion, lua.Version(), lua.ContractVersion)
	return nil
}

// quietLogger keeps one-shot commands' output to their result unless the
// operator asked for debug logs.
func quietLogger(cfg *config.Config, c *common) hclog.Logger {
	lc := cfg.Log
	if c.logLevel == "" {
		lc.Level = "warn"
	}
	return host.NewLogger(lc)
}
