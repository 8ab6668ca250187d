package scannerapi_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// touchScanner is a minimal scanner: for every due member of
// ff:idx:{fp:N}:touch it calls a library function, all in one batch.
type touchScanner struct{}

func (touchScanner) Info() scannerapi.Info {
	return scannerapi.Info{
		Name:            "touch",
		Version:         "0.1.0",
		APIVersion:      scannerapi.APIVersion,
		Family:          keys.FamilyFlow,
		DefaultInterval: 5 * time.Second,
		DefaultBatch:    50,
		Sources: []scannerapi.CandidateSource{{
			Name: "touch", Kind: scannerapi.SourceZSetDue, Key: "ff:idx:{p}:touch", Backlog: scannerapi.BacklogDue,
		}},
		Functions: []string{"ff_touch"},
	}
}

func (touchScanner) Configure(context.Context, map[string]string) error { return nil }

func (touchScanner) ScanPartition(ctx context.Context, host scannerapi.Host, req *scannerapi.ScanRequest) (*scannerapi.ScanResult, error) {
	res := &scannerapi.ScanResult{}
	var cmds []scannerapi.Command
	for _, c := range req.Candidates {
		id, err := keys.ParseExecutionID(c.Member)
		if err != nil {
			res.AddError(scannerapi.ErrInvalid, "invalid_member", 1)
			continue
		}
		cmds = append(cmds, scannerapi.FCall("ff_touch", []string{keys.Exec(id).Core()}, id.String()))
	}
	replies, err := host.Exec(ctx, cmds) // one callback for the whole batch
	if err != nil {
		return nil, err
	}
	for _, r := range replies {
		fr, err := scannerapi.ParseFunctionReply(r)
		switch {
		case err != nil:
			res.AddError(scannerapi.ErrServer, "reply", 1)
		case fr.Success:
			res.Processed++
		default:
			res.AddError(scannerapi.ErrLua, fr.Code, 1)
		}
	}
	res.More = len(req.Candidates) >= req.Batch
	return res, nil
}

func (touchScanner) SampleBacklog(context.Context, scannerapi.Host, []keys.Partition) ([]int64, error) {
	return nil, nil
}

// A plugin binary is a main that serves its scanners; a host launches it
// with package pluginhost.
func Example() {
	// In the plugin's package main:
	//
	//	func main() { scannerapi.Serve(touchScanner{}) }
	//
	// Called in a process instead (a test, say), the same scanner runs on
	// any Host:
	host := scannerapi.HostFunc(func(_ context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
		out := make([]scannerapi.Reply, len(cmds))
		for i := range cmds {
			out[i] = scannerapi.Reply{Kind: scannerapi.KindArray, Array: []scannerapi.Reply{
				{Kind: scannerapi.KindInt, Int: 1}, {Kind: scannerapi.KindString, Str: "OK"},
			}}
		}
		return out, nil
	})
	req := &scannerapi.ScanRequest{
		Partition: keys.Partition{Family: keys.FamilyFlow, Index: 7},
		Batch:     50,
		Candidates: []scannerapi.Candidate{
			{Source: "touch", Member: "{fp:7}:1b4e28ba-2fa1-4d2b-883f-0016d3cca427"},
			{Source: "touch", Member: "not-an-id"},
		},
	}
	res, err := touchScanner{}.ScanPartition(context.Background(), host, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Processed, res.Errors)
	// Output: 1 [{invalid invalid_member 1}]
}

// ExampleServe shows a plugin main.
func ExampleServe() {
	scannerapi.Serve(touchScanner{}) // does not return
}
