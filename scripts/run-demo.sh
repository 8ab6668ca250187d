#!/usr/bin/env bash
# make run: start a throwaway local server, the ffscan host with every built
# plugin (configs/demo.yaml) and the demo workload (examples/demo), and print
# a live per-scanner summary until Ctrl-C; then stop everything and remove
# the temporary files. Expects `make build` to have run (make run does it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

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

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
  || echo $((20000 + RANDOM % 20000)); }

work=$(mktemp -d -t ffscan-run-XXXXXX)
port=$(free_port)
http_port=$(free_port)
pids=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "run: stopping (demo, host, server) and removing $work"
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

"$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --logfile "$work/server.log" &
pids+=($!)
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.05
done
echo "run: $(basename "$server") on 127.0.0.1:$port (data in $work)"

go build -o "$work/demo" ./examples/demo

FFSCAN_HTTP__LISTEN="127.0.0.1:$http_port" ./bin/ffscan run --config configs/demo.yaml \
  --valkey-addr "127.0.0.1:$port" >"$work/host.log" 2>&1 &
pids+=($!)
host_pid=$!
for _ in $(seq 100); do
  if ./bin/ffscan status --addr "127.0.0.1:$http_port" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$host_pid" 2>/dev/null; then echo "run: the host exited:"; cat "$work/host.log"; exit 1; fi
  sleep 0.1
done
echo "run: ffscan host up (metrics and status on http://127.0.0.1:$http_port, log in $work/host.log)"

"$work/demo" -addr "127.0.0.1:$port" >"$work/demo.log" 2>&1 &
pids+=($!)
echo "run: demo workload running (log in $work/demo.log). Ctrl-C to stop."
echo

while true; do
  sleep 3
  if ! kill -0 "$host_pid" 2>/dev/null; then echo "run: the host exited:"; tail -20 "$work/host.log"; exit 1; fi
  echo "---- $(date +%H:%M:%S)"
  ./bin/ffscan status --addr "127.0.0.1:$http_port" | cut -c1-160 || true
  tail -n 1 "$work/demo.log" 2>/dev/null || true
done
