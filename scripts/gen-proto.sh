#!/usr/bin/env bash
# Regenerates the scanner plugin protocol's Go code from
# sdk/scannerapi/proto/scanner.proto into sdk/internal/pb (shared by the
# plugin side, sdk/scannerapi, and the host side, sdk/pluginhost).
# The generator versions are pinned here; the generated files are committed,
# so building ffscan never needs protoc. Needs protoc on PATH
# (apt-get install -y protobuf-compiler).
# Usage: scripts/gen-proto.sh   (make proto)
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12      # google.golang.org/protobuf
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2   # google.golang.org/grpc/cmd/protoc-gen-go-grpc

root=$(cd "$(dirname "$0")/.." && pwd)
command -v protoc >/dev/null || { echo "gen-proto: protoc not found; install it (apt-get install -y protobuf-compiler)" >&2; exit 2; }

# Install the pinned plugins into a private directory so the ones on PATH,
# whatever their version, are never used.
bin="$root/.cache/protoc-bin"
mkdir -p "$bin"
want="$PROTOC_GEN_GO_VERSION $PROTOC_GEN_GO_GRPC_VERSION"
if [ "$(cat "$bin/versions" 2>/dev/null)" != "$want" ] || [ ! -x "$bin/protoc-gen-go" ] || [ ! -x "$bin/protoc-gen-go-grpc" ]; then
  GOBIN="$bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
  GOBIN="$bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
  echo "$want" >"$bin/versions"
fi

cd "$root/sdk"
out=internal/pb
rm -f "$out"/*.pb.go
mkdir -p "$out"
PATH="$bin:$PATH" protoc \
  --proto_path=scannerapi/proto \
  --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  scannerapi/proto/scanner.proto
echo "gen-proto: wrote $(ls "$out"/*.pb.go | tr '\n' ' ')"
