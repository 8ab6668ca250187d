package retention_test

import (
	"os"
	"testing"

	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
)

// TestMain removes the plugin builds scannertest.PluginBinary made.
func TestMain(m *testing.M) {
	code := m.Run()
	scannertest.Cleanup()
	os.Exit(code)
}
