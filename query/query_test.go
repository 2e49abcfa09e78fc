package query

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/totals"
)

const minute = querytest.Minute

func newReader(t testing.TB, st Source, table string) *Reader {
	t.Helper()
	r, err := NewReader(context.Background(), st, table, "d")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReaderTakesSaltBucketsFromTheTable: a reader finds rows written with the table's bucket
// count, and refuses a table that does not exist or was not made by abacus.
func TestReaderTakesSaltBucketsFromTheTable(t *testing.T) {
	s, err := cellstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.EnsureTable(ctx, schema.TableLayout{Name: "agg7", Family: "d", SaltBuckets: 7}); err != nil {
		t.Fatal(err)
	}
	querytest.Seed(t, s, "agg7", 7)
	r := newReader(t, s, "agg7")
	ws, err := r.Windows(ctx, "minute", "ab1", Options{Limit: 1})
	if err != nil || len(ws) != 1 {
		t.Fatalf("windows of ab1 with 7 buckets: %v %v", ws, err)
	}
	if _, err := NewReader(ctx, s, "missing", "d"); !errors.Is(err, store.ErrNoSuchTable) {
		t.Fatalf("reader of a missing table: %v", err)
	}
	if err := s.CreateTable("foreign", map[string]int{"d": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewReader(ctx, s, "foreign", "d"); err == nil || !strings.Contains(err.Error(), schema.AttrSaltBuckets) {
		t.Fatalf("reader of a table without the layout attribute: %v", err)
	}
}

func starts(ws []Window) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "%d,", w.Start.UnixMilli()/minute)
	}
	return b.String()
}

type fakeLive map[string][]Window

func (f fakeLive) OpenWindows(_ context.Context, set, entity string) ([]Window, error) {
	return f[set+"/"+entity], nil
}

func TestWindowsRangesOrderLimitAndLive(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.Seed(t, st, table, 4)
			ctx := context.Background()
			r := newReader(t, st, table)
			cases := []struct {
				o    Options
				want string
			}{
				{Options{}, "9,8,7,6,5,4,3,2,1,0,"},
				{Options{OldestFirst: true}, "0,1,2,3,4,5,6,7,8,9,"},
				{Options{From: time.UnixMilli(3 * minute), To: time.UnixMilli(6 * minute)}, "5,4,3,"},
				{Options{From: time.UnixMilli(3 * minute), To: time.UnixMilli(6 * minute), OldestFirst: true}, "3,4,5,"},
				{Options{From: time.UnixMilli(3*minute + 1)}, "9,8,7,6,5,4,"},
				{Options{To: time.UnixMilli(2 * minute)}, "1,0,"},
				{Options{Limit: 3}, "9,8,7,"},
				{Options{Limit: 2, OldestFirst: true}, "0,1,"},
			}
			for _, c := range cases {
				ws, err := r.Windows(ctx, "minute", "ab1", c.o)
				if err != nil {
					t.Fatal(err)
				}
				if got := starts(ws); got != c.want {
					t.Fatalf("%+v: windows %s, want %s", c.o, got, c.want)
				}
				for _, w := range ws {
					i := w.Start.UnixMilli() / minute
					if w.Entity != "ab1" || w.Values["count"].Int != i || w.Values["max"].Float != float64(i)/2 ||
						w.End.UnixMilli() != (i+1)*minute || w.Final != (i < 9) || w.Revision != uint64(i+1) {
						t.Fatalf("window %d read back as %+v", i, w)
					}
				}
			}
			// A live window newer than the stored, and one not stored yet.
			r = r.WithLive(fakeLive{"minute/ab1": {
				{Entity: "ab1", Set: "minute", Start: time.UnixMilli(9 * minute), End: time.UnixMilli(10 * minute), Revision: 50,
					Values: map[string]totals.Value{"count": {Name: "count", Kind: totals.KindInt, Int: 77}}},
				{Entity: "ab1", Set: "minute", Start: time.UnixMilli(10 * minute), End: time.UnixMilli(11 * minute), Revision: 1,
					Values: map[string]totals.Value{"count": {Name: "count", Kind: totals.KindInt, Int: 1}}},
			}})
			ws, err := r.Windows(ctx, "minute", "ab1", Options{Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			if starts(ws) != "10,9,8," || !ws[0].Live || !ws[1].Live || ws[1].Values["count"].Int != 77 || ws[2].Live {
				t.Fatalf("with live windows: %s %+v", starts(ws), ws)
			}
			if _, err := r.Windows(ctx, "minute", "ab1", Options{From: time.UnixMilli(5), To: time.UnixMilli(5)}); err == nil {
				t.Fatal("empty range accepted")
			}
		})
	}
}

// TestEntitiesSkipsFromEntityToEntity: Entities lists each entity of a set once, in order, with a
// prefix, and says when a limit or its bound on entities stopped it; it reads one row per entity,
// so a bound far below the number of rows is enough.
func TestEntitiesSkipsFromEntityToEntity(t *testing.T) {
	for name, mk := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := mk(t)
			querytest.Seed(t, st, table, 4) // ab1 and ab12, ten windows each
			r := newReader(t, st, table)
			ctx := context.Background()
			list, more, err := r.Entities(ctx, "minute", EntityOptions{MaxRows: 3})
			if err != nil || more || strings.Join(list, ",") != "ab1,ab12" {
				t.Fatalf("entities %v (more %v, %v), want ab1,ab12 and no more: 20 rows, 2 entities", list, more, err)
			}
			if list, more, err := r.Entities(ctx, "minute", EntityOptions{Limit: 1}); err != nil || !more || len(list) != 1 {
				t.Fatalf("limit 1: %v (more %v, %v), want one and more", list, more, err)
			}
			if list, more, err := r.Entities(ctx, "minute", EntityOptions{MaxRows: 1}); err != nil || !more || len(list) > 1 {
				t.Fatalf("one entity looked at: %v (more %v, %v), want at most one and more", list, more, err)
			}
			if list, _, err := r.Entities(ctx, "minute", EntityOptions{Prefix: "ab12"}); err != nil || strings.Join(list, ",") != "ab12" {
				t.Fatalf("prefix ab12: %v (%v)", list, err)
			}
			if list, _, err := r.Entities(ctx, "hour", EntityOptions{}); err != nil || len(list) != 0 {
				t.Fatalf("a set with no windows: %v (%v)", list, err)
			}
		})
	}
}
