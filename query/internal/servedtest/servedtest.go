// Package servedtest builds, for the tests of both HTTP APIs (query/httpapi, query/opentsdb),
// readers and served topologies over querytest's seeded tables. It is apart from querytest
// because it imports the reader, whose own tests use querytest.
package servedtest

import (
	"context"
	"testing"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
)

// Reader reads the aggregate table of st, failing the test when it cannot.
func Reader(t testing.TB, st query.Source, table string) *query.Reader {
	t.Helper()
	r, err := query.NewReader(context.Background(), st, table, "d")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Rollups is an entity set (Dimension left empty, as callers that predate rollups do), a rollup
// by region and a global rollup over a table seeded by querytest.SeedRollups.
func Rollups(t *testing.T) query.Served {
	t.Helper()
	st, table := querytest.CellStore(t)
	querytest.SeedRollups(t, st, table)
	return query.Served{Name: "devices", Reader: Reader(t, st, table), Sets: []query.ServedSet{
		{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}},
		{Name: "region-minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}, Rollup: true, Dimension: "region"},
		{Name: "fleet-minute", Window: "tumbling 1m0s", Aggregates: []string{"count", "temp_q"}, Rollup: true},
	}}
}
