package postgres

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

// fewPartitions is the library's few_partitions(): below it, the
// function's own read of one plan per partition runs.
func TestFewPartitionsIsTheLibrarys(t *testing.T) {
	m := regexp.MustCompile(`FUNCTION ffscan\.few_partitions\(\) RETURNS integer\s+LANGUAGE sql IMMUTABLE\s+AS \$fn\$ SELECT (\d+) \$fn\$`).FindStringSubmatch(librarySQL)
	require.NotNil(t, m, "few_partitions in library.sql")
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	assert.Equal(t, n, fewPartitions)
}

// A share read applies to a read of more than a few partitions, all in
// the share, of a share that is part of the family, for a function with a
// per-partition form; its statement names each partition of the share
// once (twice with the companion), and the same share gives the same text.
func TestShareQueryAppliesOnlyWhereItReadsTheSameRows(t *testing.T) {
	share := make([]uint16, 0, 100)
	for p := range uint16(100) {
		share = append(share, p*2)
	}
	asked := share[:40]
	f := filterArgs(scannerapi.Filter{})
	sql, args, ok := shareQuery("lapsed_leases", asked, share, 256, 10, true, txStartMs, f)
	require.True(t, ok)
	assert.Equal(t, []any{partitionKeys(asked), 10, nil, nil, nil}, args)
	assert.Equal(t, 100, strings.Count(sql, "ffscan.lapsed_leases_in("))
	assert.Equal(t, 100, strings.Count(sql, "ffscan.lapsed_leases_next_in("))
	assert.Contains(t, sql, "ffscan.lapsed_leases_in(198::smallint, $2::integer, $3::text, $4::text, $5::text) WHERE 198::smallint = ANY($1::smallint[])")
	again, _, _ := shareQuery("lapsed_leases", share[50:], share, 256, 10, true, txStartMs, f)
	assert.Equal(t, sql, again, "one statement for a share")
	due, _, ok := shareQuery("lapsed_leases", asked, share, 256, 10, false, "", f)
	require.True(t, ok)
	assert.NotContains(t, due, "_next_in(")

	for name, c := range map[string]struct {
		fn           string
		parts, share []uint16
		count        uint16
	}{
		"a few partitions":           {"lapsed_leases", share[:fewPartitions], share, 256},
		"a partition outside":        {"lapsed_leases", append([]uint16{1}, asked...), share, 256},
		"the whole family":           {"lapsed_leases", asked, share, 100},
		"no share":                   {"lapsed_leases", asked, nil, 256},
		"the worker registry":        {"workers_expired", asked, share, 256},
		"not a candidate function":   {"expire_lapsed_lease", asked, share, 256},
		"a partition past the bound": {"lapsed_leases", []uint16{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 2000}, append(share, 2000), 4096},
	} {
		_, _, ok := shareQuery(c.fn, c.parts, c.share, c.count, 10, false, "", f)
		assert.False(t, ok, name)
	}
}
