// Package lua holds ffscan's Valkey Functions library "flowfabric" and its
// loader.
//
// The library follows FlowFabric's contract level 34 (same function names,
// KEYS/ARGV order, replies and resulting keyspace). Its source lives in
// src/*.lua, one file per area, and is assembled into a single library in
// file-name order. Assembly appends one generated function, ffscan_version,
// which returns our own build version: a digest of the sources, so any change
// to any function gives a new version and the loader replaces a stale copy
// without anyone having to remember to bump a number.
package lua

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// LibraryName is the name the library is registered under (FUNCTION LIST).
const LibraryName = "flowfabric"

// ContractVersion is what ff_version returns: the FlowFabric contract level
// our functions follow.
const ContractVersion = "34"

// release is bumped by hand for packaging changes that the source digest
// cannot see (for example a change of the assembly format).
const release = "1"

//go:embed src/*.lua
var sources embed.FS

var (
	assembleOnce sync.Once
	assembled    string
	version      string
	functions    []string
)

// Source returns the complete library source exactly as the loader sends it
// with FUNCTION LOAD. `make lua` writes it to bin/flowfabric.lua.
func Source() string {
	assembleOnce.Do(assemble)
	return assembled
}

// Version returns our library build version, the value ffscan_version
// returns once this library is loaded.
func Version() string {
	assembleOnce.Do(assemble)
	return version
}

// Functions returns the names of the functions our library registers,
// sorted (ffscan_version included).
func Functions() []string {
	assembleOnce.Do(assemble)
	return slices.Clone(functions)
}

// registration finds the name of each function a source registers.
var registration = regexp.MustCompile(`redis\.register_function\(\s*'([A-Za-z0-9_]+)'`)

func assemble() {
	names, err := fs.Glob(sources, "src/*.lua")
	if err != nil {
		panic(fmt.Sprintf("lua: listing embedded sources: %v", err))
	}
	sort.Strings(names)
	var body strings.Builder
	for _, n := range names {
		b, err := sources.ReadFile(n)
		if err != nil {
			panic(fmt.Sprintf("lua: reading embedded %s: %v", n, err))
		}
		if strings.HasPrefix(string(b), "#!") {
			panic(fmt.Sprintf("lua: %s must not carry a shebang; the assembler writes the only one", n))
		}
		fmt.Fprintf(&body, "-- source: lua/%s\n", n)
		body.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			body.WriteByte('\n')
		}
	}
	sum := sha256.Sum256([]byte(body.String()))
	version = release + "." + hex.EncodeToString(sum[:])[:12]

	if keyGuardBuild {
		// A different build: never mistaken for the plain one by the loader.
		version += "-keyguard"
	}

	for _, m := range registration.FindAllStringSubmatch(body.String(), -1) {
		functions = append(functions, m[1])
	}
	functions = append(functions, "ffscan_version")
	slices.Sort(functions)

	var out strings.Builder
	fmt.Fprintf(&out, "#!lua name=%s\n", LibraryName)
	fmt.Fprintf(&out, "-- ffscan build of the %s library, FlowFabric contract level %s.\n", LibraryName, ContractVersion)
	out.WriteString(body.String())
	out.WriteString("-- generated: our build version, compared by the ffscan loader\n")
	fmt.Fprintf(&out, "redis.register_function('ffscan_version', function(keys, args)\n  return '%s'\nend)\n", version)
	assembled = out.String()
	if keyGuardBuild {
		assembled = withKeyGuard(assembled)
	}
}
