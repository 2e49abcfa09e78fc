package query

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/totals"
)

// TestListEntitiesLimitTakesTheFirstInOrder: the buckets are walked at once, and a listing cut at
// its limit still answers the first entities in order, the same at every call; the scan bound
// holds across the buckets.
func TestListEntitiesLimitTakesTheFirstInOrder(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			var recs []totals.Record
			var want []string
			for i := range 40 {
				e := fmt.Sprintf("e-%02d", (i*17)%40) // written out of order
				want = append(want, e)
				recs = append(recs, totals.Record{Topology: "devices", Set: "minute", Entity: e,
					Start: querytest.T0.UnixMilli(), End: querytest.T0.UnixMilli() + minute, Final: true, Revision: 1,
					Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}})
			}
			querytest.WriteTotals(t, st, table, 4, recs)
			sort.Strings(want)
			cs := &querytest.CountingSource{Source: st}
			r := newReader(t, cs, table)
			for range 5 {
				list, more, err := r.listEntities(context.Background(), "minute", "", 7, 1000, nil)
				if err != nil || !more || strings.Join(list, " ") != strings.Join(want[:7], " ") {
					t.Fatalf("first 7 of 40: %v %v %v; want %v", list, more, err, want[:7])
				}
			}
			list, more, err := r.listEntities(context.Background(), "minute", "e-1", 100, 1000, nil)
			if err != nil || more || strings.Join(list, " ") != strings.Join(want[10:20], " ") {
				t.Fatalf("prefix e-1: %v %v %v", list, more, err)
			}
			cs.Reset()
			if _, _, err := r.listEntities(context.Background(), "minute", "", 100, 9, nil); err != ErrEntityScanLimit {
				t.Fatalf("scan bound 9 of 40: %v", err)
			} else if n := cs.Counts(); n.Scans > 9+4 {
				t.Fatalf("scan bound 9: %d reads", n.Scans)
			}
		})
	}
}

// TestListEntitiesSkipsRows: listing the entities of a set reads one or two rows per entity, not
// the entities' windows, and honours its bounds.
func TestListEntitiesSkipsRows(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.SeedTSDB(t, st, table, 4)
			cs := &querytest.CountingSource{Source: st}
			r := newReader(t, cs, table)
			ctx := context.Background()
			cs.Reset()
			list, more, err := r.listEntities(ctx, "minute", "", 10, 100, nil)
			if err != nil || more || strings.Join(list, " ") != strings.Join(querytest.TSDBEntities, " ") {
				t.Fatalf("entities of minute: %v %v %v", list, more, err)
			}
			// 3 entities x 61 rows: at most 2 reads per entity and 1 per bucket, one row each.
			if n := cs.Counts(); n.Unbounded != 0 || n.Rows > 2*3 || n.Scans > 2*3+4 {
				t.Fatalf("listing read %d rows in %d scans (%d without a limit)", n.Rows, n.Scans, n.Unbounded)
			}
			if list, _, _ := r.listEntities(ctx, "hour", "device-", 10, 100, nil); strings.Join(list, " ") != "device-001 device-002" {
				t.Fatalf("entities of hour starting with device-: %v", list)
			}
			if list, more, _ := r.listEntities(ctx, "minute", "", 1, 100, nil); len(list) != 1 || !more {
				t.Fatalf("limit 1: %v %v", list, more)
			}
			if _, _, err := r.listEntities(ctx, "minute", "", 10, 2, func(string) bool { return false }); err != ErrEntityScanLimit {
				t.Fatalf("scan bound: %v", err)
			}
			if list, _, _ := r.listEntities(ctx, "nope", "", 10, 100, nil); len(list) != 0 {
				t.Fatalf("entities of a set with no rows: %v", list)
			}
		})
	}
}
