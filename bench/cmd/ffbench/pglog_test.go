package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatementLogSaysWhichCallsWereFirstAndSlow(t *testing.T) {
	before := `2026-11-29 19:59:00.000 UTC [0] LOG:  automatic vacuum of table "bench.public.ff_attempt_p3": index scans: 0
2026-11-29 20:00:00.001 UTC [10] LOG:  duration: 0.050 ms  parse stmtcache_1: SELECT count(*) FROM ffscan.lapsed_leases($1, $2, $3)
2026-11-29 20:00:00.002 UTC [10] LOG:  duration: 250.000 ms  execute stmtcache_1: SELECT count(*) FROM ffscan.lapsed_leases($1, $2, $3)
2026-11-29 20:00:00.003 UTC [11] LOG:  duration: 3.000 ms  statement: SELECT ffscan.now_ms()
`
	round := `2026-11-29 20:00:01.000 UTC [10] LOG:  duration: 1.500 ms  execute stmtcache_1: SELECT count(*) FROM ffscan.lapsed_leases($1, $2, $3)
2026-11-29 20:00:01.001 UTC [11] LOG:  duration: 0.100 ms  parse stmtcache_2: SELECT ffscan.expire_lapsed_lease($1,
	$2, $3)
2026-11-29 20:00:01.002 UTC [11] LOG:  duration: 320.500 ms  execute stmtcache_2: SELECT ffscan.expire_lapsed_lease($1,
	$2, $3)
2026-11-29 20:00:01.003 UTC [12] LOG:  duration: 900.000 ms  statement: DELETE FROM bench_done
2026-11-29 20:00:01.004 UTC [0] LOG:  automatic analyze of table "bench.public.ff_attempt_p3"
2026-11-29 20:00:01.005 UTC [11] LOG:  duration: 2.000 ms  execute stmtcache_2: SELECT ffscan.expire_lapsed_lease($1,
	$2, $3)
`
	c, err := checkPGLog(strings.NewReader(before+round), 0, int64(len(before)))
	require.NoError(t, err)
	assert.Equal(t, 4, c.Statements, "the round's statements, not the bench's own")
	assert.Equal(t, 1, c.FirstUses, "connection 11 had not run expire_lapsed_lease; connection 10 had run lapsed_leases")
	assert.Equal(t, 1, c.Over)
	assert.Equal(t, 1, c.Autovacuum)
	assert.Equal(t, 1, c.AutovacuumBefore)
	assert.True(t, c.Stalled())
	require.NotEmpty(t, c.Slowest)
	assert.Equal(t, 320.5, c.Slowest[0].Ms)
	assert.Equal(t, 11, c.Slowest[0].Pid)
	assert.Equal(t, []string{"expire_lapsed_lease"}, c.Slowest[0].FirstUse)
	assert.Contains(t, c.Slowest[0].Text, "$2, $3)", "a statement's continuation lines are part of it")
}

func TestStatementLogOfAWarmRoundHasNoStall(t *testing.T) {
	before := "2026-11-29 20:00:00.001 UTC [10] LOG:  duration: 200.000 ms  execute s: SELECT ffscan.promote_delayed($1, $2)\n"
	round := "2026-11-29 20:00:01.000 UTC [10] LOG:  duration: 1.000 ms  execute s: SELECT ffscan.promote_delayed($1, $2)\n"
	c, err := checkPGLog(strings.NewReader(before+round), 0, int64(len(before)))
	require.NoError(t, err)
	assert.Equal(t, 1, c.Statements)
	assert.Zero(t, c.FirstUses)
	assert.False(t, c.Stalled())
}
