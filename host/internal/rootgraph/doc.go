// Package rootgraph holds the test that the package host's files call
// one another one way, in the order its test lists (rootgraph_test.go),
// and that the root's tables of contents name every file; and that
// host/plugindir's files, once the root's, call one another one way too.
package rootgraph
