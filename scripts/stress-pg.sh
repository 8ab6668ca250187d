#!/usr/bin/env bash
# stress-pg.sh: the multi-host Postgres tests, run again and again on a
# loaded machine. Two CPU burners (shell loops) run beside the tests, each
# round runs every multi-host test once (with -race, as make test does),
# and the script stops at the first round that fails. A round that fails
# leaves its whole output in the log directory printed at the start.
#
#   scripts/stress-pg.sh            # 20 rounds
#   ROUNDS=5 BURNERS=0 scripts/stress-pg.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-20}
BURNERS=${BURNERS:-2}
GO=${GO:-go}

# The tests where several hosts (or completion listeners) share one
# database, and each completion must be routed and dispatched once.
declare -A TESTS=(
	[./cmd/ffscan]='^(TestThreeHostsShareOnePostgres|TestHostsShareBehindATransactionPooler)$'
	[./host/pgcompletions]='^(TestSharingHostsDispatchEachEventOnce|TestBehindATransactionPooler|TestDispatchesOfOnePartitionDoNotConflict|TestEventsOfAStalledListenerAreDispatchedWhenItsViewReturns|TestTheListenersRoleMovesWithItsPartition|TestTheListenerDrainsEveryPartitionAndAStandbyNothing)$'
	[./host/sharing]='^TestPostgresShares$'
)

logs=$(mktemp -d -t ffscan-stress-XXXXXX)
burners=()
stop_burners() {
	for p in "${burners[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${burners[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_burners EXIT

# A test that skips for want of PostgreSQL would pass a round unseen.
export FFSCAN_TEST_REQUIRE_POSTGRES=1 FFSCAN_TEST_REQUIRE_PGBOUNCER=1
umask 022
echo "stress-pg: building the test binaries"
bins=$(mktemp -d -t ffscan-stress-bin-XXXXXX)
trap 'stop_burners; rm -rf "$bins"' EXIT
for pkg in "${!TESTS[@]}"; do
	name=$(echo "$pkg" | tr '/.' '__')
	$GO test -c -race -tags ffscan_keyguard -o "$bins/$name.test" "$pkg"
done

for ((i = 0; i < BURNERS; i++)); do
	sh -c 'while :; do :; done' &
	burners+=($!)
done
echo "stress-pg: $ROUNDS rounds beside $BURNERS CPU burners; logs in $logs"

start=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
	for pkg in "${!TESTS[@]}"; do
		name=$(echo "$pkg" | tr '/.' '__')
		log="$logs/round$r$name.log"
		t0=$(date +%s)
		# A test binary runs in its package's directory, as go test runs it.
		if ! (cd "$pkg" && "$bins/$name.test" -test.count=1 -test.timeout=20m -test.v -test.run "${TESTS[$pkg]}") >"$log" 2>&1; then
			echo "stress-pg: round $r: $pkg FAILED after $(($(date +%s) - t0)) s; output: $log"
			grep -E '^(--- FAIL|\s+\S+_test\.go:)' "$log" | head -20 || true
			exit 1
		fi
		passed=$(grep -c -- '^--- PASS' "$log" || true)
		want=$(echo "${TESTS[$pkg]}" | tr -cd '|' | wc -c)
		want=$((want + 1))
		if [ "$passed" -ne "$want" ] || grep -q -- '^--- SKIP' "$log"; then
			echo "stress-pg: round $r: $pkg passed $passed of $want tests; output: $log"
			exit 1
		fi
		echo "stress-pg: round $r: $pkg ok ($passed tests, $(($(date +%s) - t0)) s)"
		rm -f "$log"
	done
done
echo "stress-pg: all $ROUNDS rounds passed in $(($(date +%s) - start)) s"
rmdir "$logs" 2>/dev/null || true
