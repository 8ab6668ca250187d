// Package depexec runs the dependency resolver (sdk/depresolve) in the
// host process: its executor goes straight to the host's valkey-go
// client and flowfabric library. It lives host-side so the resolver itself
// stays pure planning and the depreconciler plugin links no Valkey client.
package depexec

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ffscan/ffscan/host/keyless"
	"github.com/ffscan/ffscan/lua"
	"github.com/ffscan/ffscan/sdk/depresolve"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/valkeyreply"
	"github.com/valkey-io/valkey-go"
)

// LibraryExecutor runs batches directly on a library's valkey-go client,
// for in-process callers such as the host's completion listener: FCALLs go
// through the library (a server that lost the library gets it reloaded
// once), other commands are pipelined on the client. Consecutive commands
// of one kind share a pipeline and the batch keeps its order.
//
// Only commands whose keys it can place are accepted: FCALL (its KEYS),
// TIME (none) and single-key commands (the first argument). Unlike the
// host's callback service it enforces no allowlist; it is for trusted
// code.
func LibraryExecutor(lib *lua.Library) depresolve.Executor {
	return libraryExecutor{lib: lib}
}

type libraryExecutor struct{ lib *lua.Library }

func (e libraryExecutor) Exec(ctx context.Context, cmds []scannerapi.Command) ([]scannerapi.Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	vk := e.lib.Client()
	out := make([]scannerapi.Reply, len(cmds))
	type built struct {
		fcall bool
		call  lua.Call
		plain valkey.Completed
	}
	ops := make([]built, len(cmds))
	anchor := keyAnchor(cmds)
	for i, c := range cmds {
		if len(c) == 0 {
			return nil, errors.New("depresolve: empty command")
		}
		switch name := strings.ToUpper(c[0]); name {
		case "FCALL":
			if len(c) < 3 {
				return nil, fmt.Errorf("depresolve: FCALL needs a function and numkeys: %q", c)
			}
			n, err := strconv.Atoi(c[2])
			if err != nil || n < 0 || 3+n > len(c) {
				return nil, fmt.Errorf("depresolve: FCALL %s: bad numkeys %q", c[1], c[2])
			}
			ops[i] = built{fcall: true, call: lua.Call{Function: c[1], Keys: c[3 : 3+n], Args: c[3+n:]}}
		case "TIME":
			// Sent with the batch's keys (or to a partition's master):
			// a keyless command could go to any node, a dead one too.
			ops[i] = built{plain: vk.B().Arbitrary(name).Args(c[1:]...).Build().SetSlot(anchor)}
		default:
			if len(c) < 2 {
				return nil, fmt.Errorf("depresolve: %s needs a key", name)
			}
			ops[i] = built{plain: vk.B().Arbitrary(name).Keys(c[1]).Args(c[2:]...).Build()}
		}
	}
	for i := 0; i < len(ops); {
		j := i
		for j < len(ops) && ops[j].fcall == ops[i].fcall {
			j++
		}
		var res []valkey.ValkeyResult
		if ops[i].fcall {
			calls := make([]lua.Call, 0, j-i)
			for k := i; k < j; k++ {
				calls = append(calls, ops[k].call)
			}
			res = e.lib.DoMulti(ctx, calls...)
		} else {
			seg := make(valkey.Commands, 0, j-i)
			for k := i; k < j; k++ {
				seg = append(seg, ops[k].plain)
			}
			res = vk.DoMulti(ctx, seg...)
		}
		for k, r := range res {
			out[i+k] = valkeyreply.Of(r)
		}
		i = j
	}
	return out, nil
}

// keyAnchor returns the first key a batch names, else keyless.Anchor.
func keyAnchor(cmds []scannerapi.Command) string {
	for _, c := range cmds {
		if len(c) < 2 {
			continue
		}
		switch strings.ToUpper(c[0]) {
		case "TIME":
		case "FCALL":
			if len(c) > 3 {
				if n, err := strconv.Atoi(c[2]); err == nil && n > 0 {
					return c[3]
				}
			}
		default:
			return c[1]
		}
	}
	return keyless.Anchor
}
