package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Statements are labelled by what they do: the table an insert fills,
// the library function a read calls, else their first words.
func TestStatementLabels(t *testing.T) {
	for q, want := range map[string]string{
		"WITH ins AS (\n  INSERT INTO ffscan.audit_entry (kind, host) VALUES ($1, $2) RETURNING id) SELECT id FROM ins":               "INSERT audit_entry",
		"SELECT partition_key, member, score, true FROM ffscan.delays_due($1, $2) UNION ALL SELECT 1 FROM ffscan.delays_due_next($1)": "delays_due",
		"SELECT ffscan.now_ms()": "now_ms",
		"SELECT (SELECT count(*) FROM ff_exec_core WHERE lifecycle_phase <> $1),\n\t\t(SELECT count(*) FROM ff_completion_event)": "SELECT (SELECT count(*) FROM ff_exec_core WHERE ...",
		"BEGIN": "BEGIN",
	} {
		assert.Equal(t, want, stmtLabel(q), q)
	}
}

// A count less an earlier one keeps what grew; the line lists the most
// called first, per unit, after the total.
func TestStatementCounts(t *testing.T) {
	d := minus(map[string]int64{"now_ms": 60, "delays_due": 20, "share_hold": 5}, map[string]int64{"now_ms": 10, "delays_due": 20})
	assert.Equal(t, map[string]int64{"now_ms": 50, "share_hold": 5}, d)
	assert.Equal(t, "all 5.500, now_ms 5.000 per second", statementsLine(d, 10, "per second", 1))
}
