#!/usr/bin/env bash
# Runs docs/plugin-authoring.md's first steps the way a third party does,
# outside this repository's modules: the setup commands of the block marked
# <!-- guide: setup --> (with this checkout standing in for the git clone),
# then the files of the blocks marked <!-- guide: PATH -->, go mod tidy,
# vet, build, and the guide's own test (a real server and host), then the
# commands of the block marked <!-- guide: ship --> (publish a signed
# plugin to an OCI layout, install it as an operator; offline) with this
# checkout's ffscan on PATH. Used by `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
guide="$root/docs/plugin-authoring.md"
tmp=$(mktemp -d -t ffscan-check-guide-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# block NAME prints the fenced block that follows <!-- guide: NAME -->.
block() {
  awk -v want="<!-- guide: $1 -->" '
    $0 == want { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$guide"
}

setup=$(block setup)
[ -n "$setup" ] || { echo "check-guide: no setup block in $guide" >&2; exit 1; }
grep -q '^git clone ' <<<"$setup" || { echo "check-guide: the setup block no longer clones; update this script" >&2; exit 1; }
# The clone is the one step that needs the network: this checkout stands in.
setup=$(sed "s|^git clone .*|ln -s \"$root\" ffscan|" <<<"$setup")

cd "$tmp"
export GOWORK=off GOFLAGS=-mod=mod
echo "check-guide: setup (in $tmp)"
bash -euo pipefail -c "$setup"
cd stalescan
files=$(grep -o '<!-- guide: [^ ]* -->' "$guide" | awk '{print $3}' | grep -v -e '^setup$' -e '^ship$')
[ -n "$files" ] || { echo "check-guide: no file blocks in $guide" >&2; exit 1; }
for f in $files; do
  mkdir -p "$(dirname "$f")"
  block "$f" >"$f"
  echo "check-guide: wrote $f ($(wc -l <"$f") lines)"
done
go mod tidy
go vet ./...
go build -o /dev/null ./cmd/stalescan
go test -count=1 ./...
ship=$(block ship)
[ -n "$ship" ] || { echo "check-guide: no ship block in $guide" >&2; exit 1; }
echo "check-guide: ship (publish and install)"
(cd "$root" && GOWORK= GOFLAGS= go build -o "$tmp/bin/ffscan" ./cmd/ffscan)
PATH="$tmp/bin:$PATH" bash -euo pipefail -c "$ship"
echo "check-guide: the plugin guide's module, scanner, plugin, test, publish and install work as written"
