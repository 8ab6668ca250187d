package depresolve

import (
	"context"
	"strconv"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// childCore is what resolving needs from a child's core.
type childCore struct {
	flow        string
	lane        string
	attempt     uint32
	phase       string
	eligibility string
	ownership   string
}

var childFields = []string{"execution_id", "flow_id", "lane_id", "current_lane", "current_attempt_index",
	"lifecycle_phase", "eligibility_state", "ownership_state"}

// readChildren reads the cores of children in one round trip. A child
// whose read failed or whose core is missing is absent from the map (and
// counted).
func (r *Resolver) readChildren(ctx context.Context, children []keys.ExecutionID, res *Result) (map[keys.ExecutionID]childCore, error) {
	if len(children) == 0 {
		return nil, nil
	}
	cmds := make([]scannerapi.Command, len(children))
	for i, c := range children {
		cmds[i] = append(scannerapi.Command{"HMGET", keys.Exec(c).Core()}, childFields...)
	}
	reps, err := r.exec(ctx, cmds)
	if err != nil {
		return nil, err
	}
	out := make(map[keys.ExecutionID]childCore, len(children))
	for i, c := range children {
		if cc, ok := parseChildCore(reps[i], res); ok {
			out[c] = cc
		}
	}
	return out, nil
}

// parseChildCore reads a childFields HMGET reply, counting a failed read,
// a missing core or an unparsable attempt index.
func parseChildCore(rep scannerapi.Reply, res *Result) (childCore, bool) {
	if res.replyError(rep, "read_child") {
		return childCore{}, false
	}
	f := texts(rep)
	if len(f) != len(childFields) {
		res.addError(ErrData, "unexpected_reply")
		return childCore{}, false
	}
	if f[0] == "" {
		res.addError(ErrData, "child_not_found")
		return childCore{}, false
	}
	cc := childCore{flow: f[1], lane: coreLane(f[2], f[3]), phase: f[5], eligibility: f[6], ownership: f[7]}
	if f[4] != "" {
		n, err := strconv.ParseUint(f[4], 10, 32)
		if err != nil {
			res.addError(ErrData, "bad_attempt_index")
			return childCore{}, false
		}
		cc.attempt = uint32(n)
	}
	return cc, true
}

// serverMillis reads a TIME reply as decimal ms (the library's now_ms).
func serverMillis(rep scannerapi.Reply, res *Result) (string, bool) {
	if res.replyError(rep, "time") {
		return "", false
	}
	t := texts(rep)
	if len(t) != 2 {
		res.addError(scannerapi.ErrServer, "time")
		return "", false
	}
	s, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil {
		res.addError(scannerapi.ErrServer, "time")
		return "", false
	}
	return strconv.FormatInt(s*1000+us/1000, 10), true
}

// texts returns an array reply's scalar elements as text (nil as "").
func texts(rep scannerapi.Reply) []string {
	out := make([]string, 0, len(rep.Array))
	for _, e := range rep.Array {
		s, _ := e.Text()
		out = append(out, s)
	}
	return out
}

// terminal reports a finished execution: lifecycle terminal with an
// outcome.
func terminal(phase, outcome string) bool {
	return phase == "terminal" && outcome != "" && outcome != "none"
}

// coreLane is the lane the library uses for an execution's index keys:
// lane_id, then current_lane, then "default" (H.core_lane). Only applied
// to fields read successfully from an existing core.
func coreLane(laneID, currentLane string) string {
	switch {
	case laneID != "":
		return laneID
	case currentLane != "":
		return currentLane
	}
	return "default"
}
