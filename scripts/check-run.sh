#!/usr/bin/env bash
# Checks what `make run` promises: it comes up with every scanner running,
# and Ctrl-C (SIGINT to its whole process group, as a terminal sends it)
# stops everything gracefully and leaves nothing behind. Expects `make
# build` to have run. Used by `make test`.
#
# BACKEND=postgres checks `make run BACKEND=postgres` the same way, with the
# eleven Postgres reconcilers; without a PostgreSQL installation it says so
# and passes, as the Postgres tests skip (unless
# FFSCAN_TEST_REQUIRE_POSTGRES is set, as CI sets it).
set -euo pipefail
set -m # the demo gets a process group of its own, with SIGINT not ignored
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
backend=${BACKEND:-valkey}
if [ "$backend" = postgres ] && ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
  if [ -n "${FFSCAN_TEST_REQUIRE_POSTGRES:-}" ]; then
    echo "check-run: BACKEND=postgres needs PostgreSQL (/usr/lib/postgresql/*/bin) and FFSCAN_TEST_REQUIRE_POSTGRES is set" >&2
    exit 1
  fi
  echo "check-run: skipped for BACKEND=postgres: no PostgreSQL installed"
  exit 0
fi

tmp=$(mktemp -d -t ffscan-check-run-XXXXXX)
# The demo host's admin token goes to the check's directory, not to the
# user's configuration directory.
export FFSCAN_HTTP__ADMIN_TOKEN_FILE="$tmp/admin-token"
export FFSCAN_PLUGIN_APPROVALS_FILE="$tmp/plugin-approvals.json"
out="$tmp/run.out"
mkdir "$tmp/t"
# descendants PID prints every process below PID (the demo's children run
# in process groups of their own, so a group kill would miss them).
descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$c"
    descendants "$c"
  done
}
fail() {
  echo "check-run: $*" >&2
  echo "---- make run printed:" >&2
  tail -40 "$out" >&2 || true
  # Take everything down, whatever state the demo is in: its own cleanup
  # first (SIGTERM), then SIGKILL for whatever is left.
  local left
  left=$(descendants "$pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  # shellcheck disable=SC2086
  kill -KILL "$pid" $left 2>/dev/null || true
  rm -rf "$tmp"
  exit 1
}

# env --default-signal=INT: SIGINT as a terminal's make run has it, even
# when this script inherited it ignored (a background job of a
# non-interactive shell does, and bash cannot trap a signal ignored at its
# start).
TMPDIR="$tmp/t" BACKEND="$backend" env --default-signal=INT bash scripts/run-demo.sh >"$out" 2>&1 &
pid=$!
# Up when a compact status screen shows every scanner running: every one
# the configuration run-demo.sh runs names (it enables them all), so a
# scanner added there is checked here too. The view shortens names past
# 22 columns to 21 and a '~'.
if [ "$backend" = postgres ]; then
  config=configs/demo-postgres.yaml kind="Postgres reconcilers"
else
  config=configs/demo.yaml kind="scanners"
fi
shown_names=$(awk '/^scanners:/ { on = 1; next } /^[^ #]/ { on = 0 }
  on && /^  [a-z0-9_]+:/ { sub(/^  /, ""); sub(/:.*/, ""); if (length($0) > 22) $0 = substr($0, 1, 21) "~"; print }' "$config")
[ -n "$shown_names" ] || { echo "check-run: no scanners found in $config" >&2; exit 1; }
scanners=$(paste -sd'|' <<<"$shown_names")
want=$(wc -l <<<"$shown_names")
first=$(head -1 <<<"$shown_names")
what="all $want $kind of $config"
for _ in $(seq 1200); do
  # Counted in the last status screen only (each starts "-- HH:MM:SS"):
  # summed over all of them, scanners running on an earlier screen and
  # the rest on a later one passed while two still started.
  n=$(awk -v re="^($scanners) +running" '/^-- [0-9:]+ / { n = 0 } $0 ~ re { n++ } END { print n + 0 }' "$out" 2>/dev/null || true)  # no output file yet: 0
  if [ "${n:-0}" -ge "$want" ]; then
    break
  fi
  kill -0 "$pid" 2>/dev/null || fail "make run exited before the scanners ran"
  sleep 0.1
done
grep -q "^$first  *running" "$out" || fail "the scanners did not come up within 120 s"

# The console at the address make run printed shows every scanner
# running, and the explain command it printed answers.
console=$(sed -n 's|^run: console on http://\([0-9.]*:[0-9]*\)/ .*|\1|p' "$out")
[ -n "$console" ] || fail "make run did not print the console's address"
page=$( (exec 3<>"/dev/tcp/${console%:*}/${console#*:}" && printf 'GET /?refresh=0 HTTP/1.0\r\nHost: %s\r\n\r\n' "$console" >&3 && cat <&3) 2>/dev/null) \
  || fail "the console at http://$console/ did not answer"
shown=$(grep -oE 'data-scanner="[a-z0-9_]+" data-state="running"' <<<"$page" | wc -l)
[ "$shown" -ge "$want" ] || fail "the console shows $shown scanners running, not $want"
example=$(sed -n "s|^run: why is an execution where it is? e.g. ./bin/ffscan explain '\(.*\)' --addr .*|\1|p" "$out")
if [ -n "$example" ]; then
  ./bin/ffscan explain "$example" --addr "$console" >"$tmp/explain.out" 2>&1 || fail "ffscan explain $example failed: $(cat "$tmp/explain.out")"
  grep -q '^SCANNER' "$tmp/explain.out" || fail "ffscan explain printed no verdicts: $(cat "$tmp/explain.out")"
fi

# The bound is a hang guard, above what run-demo.sh's cleanup may take by
# design: up to 15 s for each process it stops, then removing the data
# (for Postgres, the files of 6,656 partitions; beside another test run
# on two cores, more than 30 s in all once).
kill -INT -- "-$pid"
for _ in $(seq 900); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "make run did not stop within 90 s of Ctrl-C"
wait "$pid" || true

grep -q "run: the host shut down gracefully" "$out" || fail "the host did not shut down gracefully"
left=$(find "$tmp/t" -mindepth 1 | head -5)
[ -z "$left" ] || fail "left behind in TMPDIR: $left"
if pgrep -f "$tmp/t" >/dev/null; then fail "processes of the run are still alive"; fi
if [ "$backend" = postgres ]; then
  # PostgreSQL's data directory may live outside TMPDIR (see run-demo.sh).
  pgdir=$(sed -n 's/^run: PostgreSQL .*(data in \(.*\))$/\1/p' "$out")
  [ -n "$pgdir" ] || fail "make run did not say where PostgreSQL's data was"
  [ ! -e "$pgdir" ] || fail "left behind: $pgdir"
  if pgrep -f "$pgdir" >/dev/null; then fail "PostgreSQL of the run is still alive"; fi
  ! grep -qE '^run: (valkey|redis)-server on' "$out" || fail "the Postgres run started a Valkey: the host should serve the database alone"
fi
awk 'length > 100 { bad = 1 } END { exit bad }' <(grep -v '^run:' "$out") || fail "the summary has lines over 100 columns"
rm -rf "$tmp"
echo "check-run: make run (BACKEND=$backend) came up with $what (the console at the printed address showing them${example:+, ffscan explain answering}) and Ctrl-C stopped it gracefully, leaving nothing behind"
