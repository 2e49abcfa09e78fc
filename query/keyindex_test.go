package query

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/keyindex"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
)

// TestListEntitiesFromKeyIndex: once the key index is complete, every listing answers what the walk
// of the aggregates table answers, from one read of the index; before its marker the reader walks.
func TestListEntitiesFromKeyIndex(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, table := open(t)
			agg := schema.TableLayout{Name: table, Family: "d", SaltBuckets: 4}
			if err := st.(store.Tables).EnsureTable(ctx, schema.KeyIndexLayout(agg)); err != nil {
				t.Fatal(err)
			}
			if name == "hbase" {
				testenv.DropTableAtEnd(t, testenv.HBaseClient(t), schema.KeyIndexTable(table))
			}
			enc := &sinks.AggregatesEncoder{Table: table, Family: "d", SaltBuckets: 4, KeyIndex: schema.KeyIndexTable(table)}
			var cells []store.Cell
			put := func(set, e string, start int64) {
				r := totals.Record{Topology: "devices", Set: set, Entity: e, Start: start, End: start + minute, Final: true, Revision: 1,
					Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}}
				var err error
				if cells, err = enc.Encode(&kgo.Record{Value: r.Encode()}, cells); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 40 {
				e := fmt.Sprintf("e-%02d", (i*17)%40)
				for m := range int64(3) {
					put("minute", e, querytest.T0.UnixMilli()+m*minute)
				}
			}
			for _, e := range querytest.TSDBEntities {
				put("minute", e, querytest.T0.UnixMilli())
				put("hour", e, querytest.T0.UnixMilli())
			}
			put("hour", "device-003", querytest.T0.UnixMilli())
			if failed, err := st.Write(ctx, cells); err != nil || len(failed) > 0 {
				t.Fatalf("write: %v %v", failed, err)
			}
			type listing struct {
				set, prefix string
				limit, max  int
				match       func(string) bool
			}
			odd := func(e string) bool { return strings.HasSuffix(e, "1") || strings.HasSuffix(e, "3") }
			cases := []listing{
				{"minute", "", 100, 1000, nil}, {"minute", "", 7, 1000, nil}, {"minute", "e-1", 100, 1000, nil},
				{"minute", "device-", 100, 1000, nil}, {"hour", "", 100, 1000, nil}, {"hour", "device-", 1, 1000, nil},
				{"minute", "", 5, 1000, odd}, {"hour", "", 100, 1000, odd}, {"nope", "", 10, 1000, nil},
				{"min", "", 10, 1000, nil}, {"", "", 100, 1000, nil}, {"", "device-", 2, 1000, nil},
			}
			result := func(r *Reader, c listing) string {
				list, more, err := r.listEntities(ctx, c.set, c.prefix, c.limit, c.max, c.match)
				return fmt.Sprintf("%q %v %v", list, more, err)
			}
			walk := newReader(t, st, table)
			if walk.keyIndexed(ctx) {
				t.Fatal("an index without its marker counts as complete")
			}
			want := make([]string, len(cases))
			for i, c := range cases {
				want[i] = result(walk, c)
			}
			if err := keyindex.MarkComplete(ctx, st, agg); err != nil {
				t.Fatal(err)
			}
			cs := &querytest.CountingSource{Source: st}
			r := newReader(t, cs, table)
			if !r.keyIndexed(ctx) {
				t.Fatal("the reader does not see the complete index")
			}
			for i, c := range cases {
				cs.Reset()
				if got := result(r, c); got != want[i] {
					t.Errorf("listing %+v from the index: %s; the walk: %s", c, got, want[i])
				}
				// One scan of at most limit+1 rows for a set, and for every set's keys (the rows
				// that repeat them all, version 2).
				if n := cs.Counts(); n.Scans != 1 || (c.match == nil && n.Rows > c.limit+1) {
					t.Errorf("listing %+v from the index: %d scans, %d rows; want 1 scan of at most %d rows", c, n.Scans, n.Rows, c.limit+1)
				}
			}
			// An index of version 1 (made before the rows of every set's keys): the same answers,
			// every set's keys found set by set: one read to find each of the two sets, one scan
			// of each and one read that stops at the rows of version 2.
			v1 := store.Cell{Table: schema.KeyIndexTable(table), Row: schema.KeyIndexMarkerRow, Family: []byte("d"),
				Qualifier: []byte(schema.KeyIndexMarkerQualifier), Timestamp: schema.KeyIndexMarkerTimestamp, Value: []byte{1}}
			if failed, err := st.Write(ctx, []store.Cell{v1}); err != nil || len(failed) > 0 {
				t.Fatalf("write the version 1 marker: %v %v", failed, err)
			}
			r1 := newReader(t, cs, table)
			if !r1.keyIndexed(ctx) || r1.index.everySet.Load() {
				t.Fatalf("a version 1 index: complete %v, every set's keys in one scan %v", r1.index.complete.Load(), r1.index.everySet.Load())
			}
			for i, c := range cases {
				if c.set != "" {
					continue
				}
				cs.Reset()
				if got := result(r1, c); got != want[i] {
					t.Errorf("listing %+v from a version 1 index: %s; the walk: %s", c, got, want[i])
				}
				if n := cs.Counts(); n.Scans != 2*2+1 || (c.match == nil && n.Rows > 2*(c.limit+1)+3) {
					t.Errorf("listing %+v from a version 1 index: %d scans, %d rows; want 5 scans", c, n.Scans, n.Rows)
				}
			}
			if _, _, err := r.listEntities(ctx, "minute", "", 10, 2, func(string) bool { return false }); err != ErrEntityScanLimit {
				t.Fatalf("scan bound from the index: %v", err)
			}
		})
	}
}

// TestReaderNoticesReindex: a reader that started before the index was complete uses it once
// the marker is there and keyIndexRecheck has passed, without a restart.
func TestReaderNoticesReindex(t *testing.T) {
	st, table := querytest.CellStore(t)
	ctx := context.Background()
	agg := schema.TableLayout{Name: table, Family: "d", SaltBuckets: 4}
	if err := st.(store.Tables).EnsureTable(ctx, schema.KeyIndexLayout(agg)); err != nil {
		t.Fatal(err)
	}
	r := newReader(t, st, table)
	if r.keyIndexed(ctx) {
		t.Fatal("complete before the marker")
	}
	if err := keyindex.MarkComplete(ctx, st, agg); err != nil {
		t.Fatal(err)
	}
	if r.keyIndexed(ctx) {
		t.Fatal("looked again at once: a reader without the index would read the marker at every listing")
	}
	r.index.checkedAt.Store(time.Now().Add(-keyIndexRecheck - time.Second).UnixNano())
	if !r.keyIndexed(ctx) {
		t.Fatal("the marker is not noticed after keyIndexRecheck")
	}
}
