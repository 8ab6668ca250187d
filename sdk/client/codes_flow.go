package client

// Codes used by the flow and budget API that codes.go does not list because
// the library never emits them: FlowFabric's Rust parser knows them
// (reference section 6.4, "reserved"), and the client reports them for
// conditions it checks itself before calling a function that would not.
const (
	// CodeBudgetNotFound means no budget definition with this id. The
	// library's budget functions do not check this (a usage report or a
	// reset against a missing budget would create a stray definition
	// hash), so the client checks it first.
	CodeBudgetNotFound Code = "budget_not_found"
)

var (
	// ErrBudgetNotFound matches a missing budget definition.
	ErrBudgetNotFound error = sentinel(CodeBudgetNotFound)
)
