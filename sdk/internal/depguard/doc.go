// Package depguard holds the SDK's dependency guard tests: what a plugin
// author's module builds when it uses the SDK and its test kit, that a
// plugin binary links nothing of the host's side of plugins
// (sdk/pluginhost), and which modules the SDK's packages may build on. It
// has no code; the checks are its tests.
package depguard
