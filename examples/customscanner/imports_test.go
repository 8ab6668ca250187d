package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The example stands for a scanner in another repository: it may use
// ffscan's public packages only (the SDK and the key layout), never the
// host or anything internal. The one host package it may use is
// host/hosttest, the runner scannertest.Run drives for an end-to-end run
// through a real ffscan host (docs/test-kit.md says why it is host-side).
func TestOnlyThePublicAPI(t *testing.T) {
	allowed := []string{
		"github.com/ffscan/ffscan/sdk/",
		"github.com/ffscan/ffscan/keys",
		"github.com/ffscan/ffscan/host/hosttest",
		"github.com/ffscan/ffscan/examples/customscanner",
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, "github.com/ffscan/ffscan") {
				continue // the standard library and third-party modules
			}
			ok := false
			for _, a := range allowed {
				ok = ok || strings.HasPrefix(p, a)
			}
			if !ok || strings.Contains(p, "/internal") {
				t.Errorf("%s imports %s, which is not part of ffscan's public API", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
