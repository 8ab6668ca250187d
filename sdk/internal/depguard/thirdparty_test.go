package depguard

// The throwaway third-party module the guard builds: a scanner, its
// plugin main and a test using the kit and the server starter, the way a
// plugin author's repository looks. The test drives the scanner linked in
// as a host would (pluginhost.Linked, the kit's own way); the scanner and
// its main use scannerapi alone.

const thirdPartyModule = "example.com/thirdparty"

// thirdPartyMain is the third party's plugin main, the binary it ships.
const thirdPartyMain = thirdPartyModule + "/cmd/thirdparty"

var thirdPartyFiles = map[string]string{
	"scanner.go": `package thirdparty

import (
	"context"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

type Scanner struct{}

func (Scanner) Info() scannerapi.Info {
	return scannerapi.Info{Name: "thirdparty", APIVersion: scannerapi.APIVersion, Family: keys.FamilyFlow}
}

func (Scanner) Configure(context.Context, map[string]string) error { return nil }

func (Scanner) ScanPartition(context.Context, scannerapi.Host, *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	return &scannerapi.ScanResult{}, nil
}
`,
	"cmd/thirdparty/main.go": `package main

import (
	"example.com/thirdparty"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

func main() { scannerapi.Serve(thirdparty.Scanner{}) }
`,
	"scanner_test.go": `package thirdparty

import (
	"context"
	"testing"

	"github.com/ffscan/ffscan/sdk/client"
	"github.com/ffscan/ffscan/sdk/pluginhost"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scannertest"
	"github.com/ffscan/ffscan/sdk/testserver"
)

var _ scannertest.Runner
var _ *client.Client

func TestScanner(t *testing.T) {
	c := testserver.New(t).Client(t)
	linked := pluginhost.Linked(Scanner{}, scannertest.Callbacks(c))
	if _, err := linked.ScanPartition(context.Background(), nil, &scannerapi.ScanRequest{}); err != nil {
		t.Fatal(err)
	}
	_ = scannertest.PluginBinary(t, "example.com/thirdparty/cmd/thirdparty")
	scannertest.Same(t, scannertest.Report{}, scannertest.Report{})
}
`,
}
