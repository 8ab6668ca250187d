#!/usr/bin/env bash
# Developer loop for the Lua library: start a throwaway server, load the
# assembled library, replay the FlowFabric golden vectors, stop the server.
# Usage: [COMPAT_SET=fuzz] scripts/compat-dev.sh [compatcheck flags, e.g. -run claim_ -max-diff 0]
# COMPAT_SET picks the vector directory under compat/ (default: vectors).
# make test runs the same replay as a Go test (lua/compat_test.go).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${FFSCAN_SHARED_DIR:-$root/../shared}
[ -d "$shared/compat/vectors" ] || { echo "compat-dev: no vectors at $shared/compat (set FFSCAN_SHARED_DIR)"; exit 2; }
server=$(command -v valkey-server || command -v redis-server || true)
cli=$(command -v valkey-cli || command -v redis-cli || true)
[ -n "$server" ] && [ -n "$cli" ] || { echo "compat-dev: need valkey-server/redis-server and its cli on PATH"; exit 2; }
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize no >"$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do "$cli" -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
(cd "$root" && go run github.com/ffscan/ffscan/lua/cmd/genlua -o "$work/flowfabric.lua")
"$cli" -p "$port" -x FUNCTION LOAD REPLACE <"$work/flowfabric.lua" >"$work/load.out" 2>&1
if ! grep -qx flowfabric "$work/load.out"; then echo "compat-dev: FUNCTION LOAD failed:"; cat "$work/load.out"; exit 1; fi
(cd "$shared/compat/compatcheck" && go build -o "$work/compatcheck" .)
"$work/compatcheck" -addr "127.0.0.1:$port" -vectors "$shared/compat/${COMPAT_SET:-vectors}" -missing skip "$@"
