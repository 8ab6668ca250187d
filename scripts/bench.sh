#!/usr/bin/env bash
# make bench: side-by-side benchmarks of ffscan on a throwaway local server
# (see docs/performance.md for what each one measures and a recorded run).
#
#   scripts/bench.sh            full size (100k-lease drain, 10k burst, 20 s idle,
#                               10-level DAG chains); about 12 minutes on 2 cores
#   scripts/bench.sh -quick     CI-sized numbers in about a minute
#   scripts/bench.sh -only drain,idle -reps 5    any ffbench flag (-h lists them)
#
# The report goes to stdout, progress to stderr. FFBENCH_NO_BUILD=1 skips the
# build of bin/ (make bench has just built it). Needs valkey-server or
# redis-server on PATH (or FFSCAN_TEST_SERVER).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

args=()
for a in "$@"; do
  case "$a" in
    --quick) args+=(-quick) ;;
    *) args+=("$a") ;;
  esac
done

if [ "${FFBENCH_NO_BUILD:-}" != 1 ]; then
  make --no-print-directory build >&2
fi

work=$(mktemp -d -t ffbench-XXXXXX)
trap 'rm -rf "$work"' EXIT
go build -o "$work/ffbench" ./bench/cmd/ffbench

echo "bench: $(nproc) CPUs; uptime:$(uptime | sed 's/.*up/ up/')" >&2
"$work/ffbench" -bin bin ${args[@]+"${args[@]}"}
