#!/usr/bin/env bash
# make run: start a throwaway local server, the ffscan host with every built
# plugin (configs/demo.yaml) and the demo workload (examples/demo), and print
# a live per-scanner summary until Ctrl-C; then stop everything and remove
# the temporary files. Expects `make build` to have run (make run does it).
#
# BACKEND=postgres (make run BACKEND=postgres): a throwaway PostgreSQL as
# well, with FlowFabric's schema created by `ffscan postgres create-schema`,
# the host with the Postgres reconcilers (configs/demo-postgres.yaml) and
# the Postgres demo workload (examples/pgdemo). No Valkey runs: the host
# serves the database alone.
#
# Job control (set -m) puts every background process in a process group of
# its own, so the terminal's Ctrl-C reaches only this script: each child
# then gets exactly one SIGTERM from cleanup, and the host shuts down
# gracefully (a second signal would make it exit at once).
set -euo pipefail
set -m
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

backend=${BACKEND:-valkey}
case "$backend" in
  valkey|postgres) ;;
  *) echo "run: BACKEND must be valkey or postgres, not \"$backend\"" >&2; exit 2 ;;
esac

if [ "$backend" = valkey ]; then
  server=$(command -v valkey-server || command -v redis-server || true)
  if [ -z "$server" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "run: no valkey-server or redis-server found; installing redis-server with apt-get"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
      server=$(command -v redis-server)
    else
      echo "run: no valkey-server or redis-server on PATH. Install one (e.g. sudo apt-get install -y redis-server) and retry." >&2
      exit 1
    fi
  fi
fi

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [ "$backend" = postgres ] && [ -z "$(pg_bin)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "run: no PostgreSQL found; installing postgresql with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "run: no PostgreSQL in /usr/lib/postgresql/*/bin. Install it (e.g. sudo apt-get install -y postgresql) and retry." >&2
    exit 1
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
  || echo $((20000 + RANDOM % 20000)); }

work=$(mktemp -d -t ffscan-run-XXXXXX)
port=$(free_port)
http_port=$(free_port)
pids=()
extra_dirs=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "run: stopping (demo, host, server) and removing $work"
  # Newest first: the status view and the demo, then the host (it drains
  # within shutdown_timeout, 5 s in demo.yaml, and stops its plugins),
  # then the server.
  for ((i=${#pids[@]}-1; i>=0; i--)); do
    p=${pids[$i]}
    sig=TERM
    [ "$p" = "${pg_pid:-}" ] && sig=INT
    kill -"$sig" "$p" 2>/dev/null || continue
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
      echo "run: pid $p did not stop within 15 s; killing it"
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  if [ -n "${host_log:-}" ] && grep -q "shutdown complete" "$host_log"; then
    echo "run: the host shut down gracefully ($(grep -o 'shutdown complete.*' "$host_log" | head -1))"
  fi
  rm -rf "$work" ${extra_dirs[@]+"${extra_dirs[@]}"}
}
trap cleanup EXIT
trap 'exit 0' INT TERM

config=configs/demo.yaml
host_args=()
if [ "$backend" = valkey ]; then
  "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --logfile "$work/server.log" &
  pids+=($!)
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.05
  done
  echo "run: $(basename "$server") on 127.0.0.1:$port (data in $work)"
  host_args=(--valkey-addr "127.0.0.1:$port")
fi

if [ "$backend" = postgres ]; then
  # PostgreSQL refuses to run as root: then it runs as the postgres user,
  # in a directory that user owns.
  pg=$(pg_bin)
  pg_port=$(free_port)
  pgdir="$work/pg"
  as_pg=()
  if [ "$(id -u)" = 0 ]; then
    # The postgres user must reach the directory: under /tmp, whose
    # parents anyone may pass (a TMPDIR inside a private directory would
    # stop it), removed with the rest.
    pgdir=$(mktemp -d /tmp/ffscan-run-pg-XXXXXX)
    extra_dirs+=("$pgdir")
    chown postgres: "$pgdir"
    as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  else
    mkdir "$pgdir"
  fi
  "${as_pg[@]}" "$pg/initdb" -D "$pgdir/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$work/initdb.log" 2>&1 \
    || { echo "run: initdb failed:"; cat "$work/initdb.log"; exit 1; }
  "${as_pg[@]}" "$pg/postgres" -D "$pgdir/data" -p "$pg_port" -c listen_addresses=127.0.0.1 -c unix_socket_directories="$pgdir" \
    -c max_locks_per_transaction=256 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
    >"$work/postgres.log" 2>&1 &
  pids+=($!)
  # A throwaway server: stopped with SIGINT (fast shutdown), and with
  # fsync off its shutdown checkpoint does not flush 6,656 partitions'
  # files (under load that took longer than the 15 s the cleanup waits).
  pg_pid=$!
  for _ in $(seq 200); do
    if "$pg/pg_isready" -q -h 127.0.0.1 -p "$pg_port"; then break; fi
    sleep 0.05
  done
  "$pg/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -c "CREATE DATABASE ffscan" postgres
  dsn="postgres://postgres@127.0.0.1:$pg_port/ffscan?sslmode=disable"
  echo "run: PostgreSQL $(basename "$(dirname "$pg")") on 127.0.0.1:$pg_port (data in $pgdir)"
  ./bin/ffscan postgres create-schema --postgres-dsn "$dsn" | sed 's/^/run: /'
  config=configs/demo-postgres.yaml
  host_args=(--postgres-dsn "$dsn")  # and no Valkey: the host serves the database alone
  go build -o "$work/demo" ./examples/pgdemo
  demo_args=(-dsn "$dsn")
else
  go build -o "$work/demo" ./examples/demo
  demo_args=(-addr "127.0.0.1:$port")
fi

# The host's temporary files (its plugins' sockets) go under $work too.
mkdir "$work/tmp"
host_log="$work/host.log"
TMPDIR="$work/tmp" FFSCAN_HTTP__LISTEN="127.0.0.1:$http_port" \
  FFSCAN_PLUGIN_APPROVALS_FILE="$work/plugin-approvals.json" ./bin/ffscan run --config "$config" \
  ${host_args[@]+"${host_args[@]}"} >"$host_log" 2>&1 &
pids+=($!)
host_pid=$!
for _ in $(seq 100); do
  if ./bin/ffscan status --addr "127.0.0.1:$http_port" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$host_pid" 2>/dev/null; then echo "run: the host exited:"; cat "$work/host.log"; exit 1; fi
  sleep 0.1
done
echo "run: ffscan host up (console, metrics and status on http://127.0.0.1:$http_port, log in $work/host.log)"

"$work/demo" "${demo_args[@]}" >"$work/demo.log" 2>&1 &
pids+=($!)
echo "run: demo workload running (log in $work/demo.log). Ctrl-C to stop."
echo "run: console on http://127.0.0.1:$http_port/ (actions take the admin token: ${FFSCAN_HTTP__ADMIN_TOKEN_FILE:-~/.config/ffscan/admin-token})"

# An execution of the demo to explain: one holding a lease (Valkey) or an
# active one (Postgres), once the workload made one (a few seconds).
example_execution() {
  if [ "$backend" = postgres ]; then
    "$pg/psql" -qtA -h 127.0.0.1 -p "$pg_port" -U postgres -d ffscan -c \
      "SELECT '{fp:' || partition_key || '}:' || execution_id FROM ff_exec_core WHERE lifecycle_phase = 'active' LIMIT 1" 2>/dev/null
    return
  fi
  local cli key
  cli=$(command -v valkey-cli || command -v redis-cli || true)
  [ -n "$cli" ] || return 0
  # A delayed execution stays put for a while (the demo delays some by an
  # hour), so its verdict still holds when you type the command; else one
  # holding a lease.
  key=$("$cli" -p "$port" --scan --pattern 'ff:idx:*:lane:*:delayed' 2>/dev/null | head -1)
  [ -n "$key" ] || key=$("$cli" -p "$port" --scan --pattern 'ff:idx:*:lease_expiry' 2>/dev/null | head -1)
  [ -n "$key" ] && "$cli" -p "$port" ZRANGE "$key" -1 -1 2>/dev/null
}
example=""
for _ in $(seq 50); do
  example=$(example_execution || true)
  [ -n "$example" ] && break
  sleep 0.1
done
if [ -n "$example" ]; then
  echo "run: why is an execution where it is? e.g. ./bin/ffscan explain '$example' --addr 127.0.0.1:$http_port"
else
  echo "run: explain an execution: ./bin/ffscan explain EXECUTION_ID --addr 127.0.0.1:$http_port (or the console's explain form)"
fi
echo

# The compact view (ffscan status --watch) until Ctrl-C; it fails when the
# host stops answering.
./bin/ffscan status --watch 3s --addr "127.0.0.1:$http_port" &
pids+=($!)
watch_pid=$!
# wait returns on Ctrl-C too (the trap runs cleanup through exit).
if ! wait "$watch_pid"; then
  echo "run: the host stopped answering; its log ends:"
  tail -20 "$host_log"
  exit 1
fi
