package lua

import (
	_ "embed"
	"strings"
)

// keyGuardPrelude is the key guard: it makes a library function fail when
// it touches a key that is neither among its KEYS nor a listed exception
// (docs/compat.md, "Keys a function touches").
//
//go:embed guard/keyguard.lua
var keyGuardPrelude string

// keyGuardBuild is set by the ffscan_keyguard build tag (keyguard_on.go):
// every test run by make test loads the guarded library, so every function
// registered, including ones added later, is checked on every call.
var keyGuardBuild bool

// guardedCalls routes the library's server calls and registrations through
// the guard. Aliases (local call = redis.call) are rewritten too.
var guardedCalls = strings.NewReplacer(
	"redis.register_function", "FFKG.register",
	"redis.pcall", "FFKG.pcall",
	"redis.call", "FFKG.call",
)

// withKeyGuard returns a library source (its first line the #!lua header)
// with the guard prelude inserted after the header and every call routed
// through it.
func withKeyGuard(src string) string {
	i := strings.IndexByte(src, '\n')
	if i < 0 {
		return src
	}
	return src[:i+1] + keyGuardPrelude + guardedCalls.Replace(src[i+1:])
}

// KeyGuarded reports whether this build loads the key-guarded library.
func KeyGuarded() bool { return keyGuardBuild }
