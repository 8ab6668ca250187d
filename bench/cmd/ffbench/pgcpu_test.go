package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPGProcessKind(t *testing.T) {
	for _, c := range []struct{ backend, db, app, query, want string }{
		{"client backend", "bench", "ffscan reads", "SELECT ffscan.now_ms() /* after lapsed_leases */", "reads lapsed_leases"},
		{"client backend", "bench", "ffscan reads", "SELECT partition_key, member, score FROM ffscan.completions_pending($1, $2, $3, $4, $5, $6)", "reads completions_pending"},
		{"client backend", "bench", "ffscan reads", "", "reads (none yet)"},
		{"client backend", "bench", "", "SELECT ffscan.expire_lapsed_leases($1)", "hosts' pools"},
		{"client backend", "bench", benchAppName, "SELECT 1", "the bench's reads"},
		{"client backend", "postgres", "", "SELECT 1", "the bench's reads"},
		{"autovacuum worker", "bench", "", "", "autovacuum worker"},
	} {
		if got := pgProcessKind(c.backend, c.db, c.app, c.query); got != c.want {
			t.Errorf("pgProcessKind(%q, %q, %q, %q) = %q, want %q", c.backend, c.db, c.app, c.query, got, c.want)
		}
	}
}

// A process's CPU counts from the first snapshot, a process that started
// in between counts whole, and what no snapshot holds is the rest of the
// server's total.
func TestPGCPUBy(t *testing.T) {
	before := map[int]pgProcess{1: {"reads a", 100 * time.Millisecond}, 2: {"hosts' pools", time.Second}, 3: {"autovacuum worker", time.Second}}
	after := map[int]pgProcess{1: {"reads a", 300 * time.Millisecond}, 2: {"hosts' pools", 1500 * time.Millisecond}, 4: {"reads a", 50 * time.Millisecond}}
	assert.Equal(t, map[string]time.Duration{
		"reads a":                   250 * time.Millisecond,
		"hosts' pools":              500 * time.Millisecond,
		"ended, and the postmaster": 250 * time.Millisecond,
	}, pgCPUBy(before, after, time.Second))
}
