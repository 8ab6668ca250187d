package keys

import (
	"strconv"
	"strings"
)

// IDForm says how a stored id string relates to the canonical spelling.
// Scanners meet ids as index members; what they may do with one depends on
// its form.
type IDForm int

const (
	// IDCanonical parses strictly and names exactly the keys we build.
	IDCanonical IDForm = iota
	// IDNonCanonical is a spelling FlowFabric's own parser accepts but we
	// do not ("{fp:007}:…", "{fp:+7}:…", upper-case, 32-hex, braced or urn
	// uuids). FlowFabric keeps such ids verbatim, so keys may really exist
	// under that spelling: leave the member in place and report it.
	IDNonCanonical
	// IDInvalid is not an id in any spelling. It can never name keys, so a
	// scanner may remove it from an index.
	IDInvalid
	// IDForeign is a canonical id of another partition than the index it
	// was found in (ClassifyExecutionIDIn). No function can act on it from
	// there (its keys are in another slot): a scanner may remove it from
	// that index; the execution's own entries are elsewhere.
	IDForeign
)

// String names the form for logs and error codes.
func (f IDForm) String() string {
	switch f {
	case IDCanonical:
		return "canonical"
	case IDNonCanonical:
		return "non_canonical"
	case IDForeign:
		return "foreign"
	}
	return "invalid"
}

// ClassifyExecutionIDIn is ClassifyExecutionID for a member of an index of
// partition p: a canonical id of another partition is IDForeign (the id is
// set).
func ClassifyExecutionIDIn(s string, p Partition) (ExecutionID, IDForm) {
	id, form := ClassifyExecutionID(s)
	if form == IDCanonical && id.Partition() != p {
		return id, IDForeign
	}
	return id, form
}

// ClassifyExecutionID parses s strictly and, when that fails, tells a
// spelling FlowFabric would accept from garbage. The id is set only for
// IDCanonical.
func ClassifyExecutionID(s string) (ExecutionID, IDForm) {
	if id, err := ParseExecutionID(s); err == nil {
		return id, IDCanonical
	}
	rest, ok := strings.CutPrefix(s, "{fp:")
	if !ok {
		return ExecutionID{}, IDInvalid
	}
	num, u, ok := strings.Cut(rest, "}:")
	if !ok {
		return ExecutionID{}, IDInvalid
	}
	// Rust's u16 parser takes one leading '+'.
	if _, err := strconv.ParseUint(strings.TrimPrefix(num, "+"), 10, 16); err != nil {
		return ExecutionID{}, IDInvalid
	}
	if !lenientUUID(u) {
		return ExecutionID{}, IDInvalid
	}
	return ExecutionID{}, IDNonCanonical
}

// ClassifyBudgetID is ClassifyExecutionID for bare budget ids.
func ClassifyBudgetID(s string) (BudgetID, IDForm) {
	u, err := parseCanonicalUUID(s)
	if err == nil {
		return BudgetID{u}, IDCanonical
	}
	if lenientUUID(s) {
		return BudgetID{}, IDNonCanonical
	}
	return BudgetID{}, IDInvalid
}

// lenientUUID accepts every form Rust's uuid parser does: hyphenated or
// simple in any case, braced, or urn:uuid: prefixed.
func lenientUUID(s string) bool {
	if inner, ok := strings.CutPrefix(s, "urn:uuid:"); ok {
		s = inner
	} else if len(s) == 38 && s[0] == '{' && s[37] == '}' {
		s = s[1:37]
	}
	_, err := ParseUUID(s)
	return err == nil
}

// ClassifyFlowID is ClassifyExecutionID for bare flow ids.
func ClassifyFlowID(s string) (FlowID, IDForm) {
	b, form := ClassifyBudgetID(s)
	if form != IDCanonical {
		return FlowID{}, form
	}
	return FlowID(b), IDCanonical
}
