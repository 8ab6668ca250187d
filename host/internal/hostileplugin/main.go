// Command hostileplugin serves the hostile scanner (host/internal/hostile)
// as a plugin, for the host's tests (host/hostile).
//
// Link-time variables (go build -ldflags "-X main.mode=..."): mode is the
// scanner's mode (hostile.New).
package main

import (
	"github.com/ffscan/ffscan/host/internal/hostile"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

var mode = ""

func main() {
	if mode == "startup" {
		hostile.StartupAttack()
	}
	scannerapi.Serve(hostile.New(mode))
}
