package depresolve

import (
	"encoding/json"
	"fmt"

	"github.com/ffscan/ffscan/keys"
)

// Completion is a flow member that reached a terminal state, as published
// on ff:dag:completions.
type Completion struct {
	Execution keys.ExecutionID
	Flow      keys.FlowID
	// Outcome is the published outcome. It is informational: Cascade
	// resolves with the outcome stored in the execution's core.
	Outcome string
}

// ParseCompletion decodes a ff:dag:completions message: a JSON object
// with execution_id, flow_id and (optional) outcome.
func ParseCompletion(payload []byte) (Completion, error) {
	var m struct {
		ExecutionID string `json:"execution_id"`
		FlowID      string `json:"flow_id"`
		Outcome     string `json:"outcome"`
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		return Completion{}, fmt.Errorf("depresolve: completion message: %w", err)
	}
	eid, err := keys.ParseExecutionID(m.ExecutionID)
	if err != nil {
		return Completion{}, fmt.Errorf("depresolve: completion message: %w", err)
	}
	fid, err := keys.ParseFlowID(m.FlowID)
	if err != nil {
		return Completion{}, fmt.Errorf("depresolve: completion message: %w", err)
	}
	return Completion{Execution: eid, Flow: fid, Outcome: m.Outcome}, nil
}
