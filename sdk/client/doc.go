// Package client is the Go client of ffscan for producers and workers of
// FlowFabric-style durable executions on Valkey.
//
// A Client creates executions (solo or as flow members), changes their
// priority and tags, cancels them and reads their state. A Worker (built on
// a Client) registers a worker instance, claims eligible executions from
// its lanes, keeps the lease of every claimed Task alive and completes,
// fails or cancels it.
//
// Every state change is exactly one FCALL of the flowfabric library (package
// lua), which re-validates state inside Valkey; the client only prepares
// KEYS and ARGV in FlowFabric's layout (package keys) and interprets the
// reply. The only plain writes are the worker registry keys (alive guard,
// capability advertisement, workers index), which FlowFabric's own SDK also
// writes directly.
//
// Errors: a Lua error reply {0, code, detail...} becomes a *ScriptError
// whose Code is the Lua code. Each code has a sentinel (ErrStaleLease, ...)
// for errors.Is, and codes with structured details have their own types
// (*ExecutionNotActiveError, *CapabilityMismatchError, ...) for errors.As.
// Bad input is rejected before anything is written with a *ValidationError
// naming the field (errors.Is(err, ErrInvalidArgument)).
package client
