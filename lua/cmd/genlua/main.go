// Command genlua writes the assembled flowfabric library source, exactly as
// the ffscan loader loads it, to a file or standard output. Operators whose
// Valkey user may not run FUNCTION LOAD from ffscan load this file with their
// own tooling: valkey-cli -x FUNCTION LOAD REPLACE < bin/flowfabric.lua
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ffscan/ffscan/lua"
)

func main() {
	out := flag.String("o", "", "write the library here instead of standard output")
	flag.Parse()
	if *out == "" {
		fmt.Print(lua.Source())
		return
	}
	if err := os.WriteFile(*out, []byte(lua.Source()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genlua:", err)
		os.Exit(1)
	}
}
