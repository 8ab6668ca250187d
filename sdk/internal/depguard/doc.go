// Package depguard holds the SDK's dependency guard tests: what a plugin
// author's module builds when it uses the SDK and its test kit. It has no
// code; the checks are its tests.
package depguard
