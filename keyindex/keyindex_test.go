package keyindex_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/keyindex"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/totals"
)

const minute = int64(time.Minute / time.Millisecond)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixMilli()

// backend is a store as the sinks and queries use it.
type backend interface {
	store.Reader
	store.Writer
	store.Tables
}

// backends gives each test the embedded cell store and, when it runs, the real HBase; each call
// of one gives a store and an aggregates table name of its own.
func backends(t *testing.T) map[string]func(t *testing.T) (backend, string) {
	return map[string]func(t *testing.T) (backend, string){
		"cellstore": func(t *testing.T) (backend, string) {
			st, err := cellstore.Open("")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st, "agg"
		},
		"hbase": func(t *testing.T) (backend, string) {
			c := testenv.HBaseClient(t)
			st, err := hbasestore.New(c, hbasestore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			table := fmt.Sprintf("keyindextest_%d", time.Now().UnixNano())
			testenv.DropTableAtEnd(t, c, table)
			testenv.DropTableAtEnd(t, c, schema.KeyIndexTable(table))
			return st, table
		},
	}
}

// seeded is an aggregates table written as the sink writes it, with or without the key index.
type seeded struct {
	st    backend
	agg   schema.TableLayout
	index []store.Cell // the index cells the sink wrote (with an index)
	keys  map[string][]string
}

// seed writes windows of three sets for keys that need escaping and sort in awkward places, over
// two days so that a key's index row is written twice (two refresh periods).
func seed(t *testing.T, open func(t *testing.T) (backend, string), withIndex bool) *seeded {
	t.Helper()
	st, name := open(t)
	agg := schema.TableLayout{Name: name, Family: "d", SaltBuckets: 4, TTL: 0}
	ctx := context.Background()
	var err error
	for _, l := range []schema.TableLayout{agg, schema.KeyIndexLayout(agg)} {
		if err := st.EnsureTable(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	enc := &sinks.AggregatesEncoder{Table: agg.Name, Family: agg.Family, SaltBuckets: agg.SaltBuckets}
	if withIndex {
		enc.KeyIndex = schema.KeyIndexTable(agg.Name)
	}
	s := &seeded{st: st, agg: agg, keys: map[string][]string{
		"minute": {"a", "a\x00", "a\x01b", "ab", "device-001", "device-002", "région-7"},
		"hour":   {"device-001", "device-003"},
		"region": {"eu", "us"},
	}}
	var cells []store.Cell
	for set, keys := range s.keys {
		for _, k := range keys {
			for _, start := range []int64{t0, t0 + minute, t0 + 24*60*minute} {
				r := totals.Record{Topology: "devices", Set: set, Entity: k, Start: start, End: start + minute, Final: true, Revision: 1,
					Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}}
				if cells, err = enc.Encode(&kgo.Record{Value: r.Encode()}, cells); err != nil {
					t.Fatal(err)
				}
			}
		}
		slices.Sort(keys)
	}
	if failed, err := st.Write(ctx, cells); err != nil || len(failed) > 0 {
		t.Fatalf("write: %v %v", failed, err)
	}
	for _, c := range cells {
		if c.Table == schema.KeyIndexTable(agg.Name) {
			s.index = append(s.index, c)
		}
	}
	return s
}

// indexCells reads the index table, newest version of each cell.
func (s *seeded) indexCells(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := s.st.Scan(context.Background(), store.ScanSpec{Table: schema.KeyIndexTable(s.agg.Name), Family: "d"},
		func(row []byte, cells []store.Cell) bool {
			for _, c := range cells {
				out[fmt.Sprintf("%x/%s", row, c.Qualifier)] = c.Timestamp
			}
			return true
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRebuildWritesWhatTheSinkWrites: a rebuild from the windows alone gives every set and key the
// index row, with the timestamp, that the sink's own writing gave it, then marks the index
// complete; before the mark nothing says it is.
func TestRebuildWritesWhatTheSinkWrites(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) { testRebuild(t, open) })
	}
}

func testRebuild(t *testing.T, open func(t *testing.T) (backend, string)) {
	ctx := context.Background()
	bySink := seed(t, open, true)
	want := bySink.indexCells(t)
	// 11 set and key pairs, and the 10 keys among every set's.
	if len(want) != 7+2+2+10 {
		t.Fatalf("the sink indexed %d index rows, want 21: %v", len(want), want)
	}
	if len(bySink.index) != 2*len(want) {
		t.Fatalf("the sink wrote %d index cells for %d keys over two days, want one per key per day", len(bySink.index), len(want))
	}
	s := seed(t, open, false)
	if got := s.indexCells(t); len(got) != 0 {
		t.Fatalf("without KeyIndex the encoder wrote index cells: %v", got)
	}
	if ok, err := keyindex.Complete(ctx, s.st, s.agg.Name, "d"); ok || err != nil {
		t.Fatalf("Complete before any marker: %v %v", ok, err)
	}
	if ok, err := keyindex.Complete(ctx, s.st, s.agg.Name+"_missing", "d"); ok || err != nil {
		t.Fatalf("Complete without an index table: %v %v, want false and no error", ok, err)
	}
	stats, err := keyindex.Rebuild(ctx, s.st, s.agg, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Keys != 11 || stats.Reads > 11+4 {
		t.Fatalf("rebuild: %+v, want 11 keys from at most one read per key and one per bucket", stats)
	}
	got := s.indexCells(t)
	marker := fmt.Sprintf("%x/%s", schema.KeyIndexMarkerRow, schema.KeyIndexMarkerQualifier)
	if got[marker] != schema.KeyIndexMarkerTimestamp {
		t.Fatalf("no marker after the rebuild: %v", got)
	}
	delete(got, marker)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rebuilt index\n %v\nthe sink's\n %v", got, want)
	}
	if ok, err := keyindex.Complete(ctx, s.st, s.agg.Name, "d"); !ok || err != nil {
		t.Fatalf("Complete after the rebuild: %v %v", ok, err)
	}
}

// TestList answers listings from the index as the walk of the aggregates table does: in order,
// cut at the limit with more, by prefix and match, bounded by the rows it examines.
func TestList(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) { testList(t, open) })
	}
}

func testList(t *testing.T, open func(t *testing.T) (backend, string)) {
	ctx := context.Background()
	s := seed(t, open, true)
	if err := keyindex.MarkComplete(ctx, s.st, s.agg); err != nil {
		t.Fatal(err)
	}
	list := func(set, prefix string, limit, maxExamined int, match func(string) bool) string {
		keys, more, err := keyindex.List(ctx, s.st, keyindex.Listing{Table: s.agg.Name, Family: "d", Set: set, Prefix: prefix, Limit: limit, MaxExamined: maxExamined, Match: match})
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("%q %v", keys, more)
	}
	all := func(keys ...string) string { return fmt.Sprintf("%q false", keys) }
	for _, tc := range []struct{ name, got, want string }{
		{"minute", list("minute", "", 100, 1000, nil), all(s.keys["minute"]...)},
		{"hour", list("hour", "", 100, 1000, nil), all("device-001", "device-003")},
		{"limit", list("minute", "", 3, 1000, nil), fmt.Sprintf("%q true", s.keys["minute"][:3])},
		{"limit = count", list("region", "", 2, 1000, nil), all("eu", "us")},
		{"prefix", list("minute", "a", 100, 1000, nil), all("a", "a\x00", "a\x01b", "ab")},
		{"prefix with 0x00", list("minute", "a\x00", 100, 1000, nil), all("a\x00")},
		{"prefix device-", list("minute", "device-", 100, 1000, nil), all("device-001", "device-002")},
		{"match", list("minute", "", 100, 1000, func(k string) bool { return strings.HasSuffix(k, "2") }), all("device-002")},
		{"no such set", list("day", "", 100, 1000, nil), "[] false"},
		{"set that prefixes another", list("min", "", 100, 1000, nil), "[] false"},
		{"any set", list("", "", 100, 1000, nil), all("a", "a\x00", "a\x01b", "ab", "device-001", "device-002", "device-003", "eu", "région-7", "us")},
		{"any set, prefix", list("", "device-00", 2, 1000, nil), fmt.Sprintf("%q true", []string{"device-001", "device-002"})},
		{"any set, limit", list("", "", 3, 1000, nil), fmt.Sprintf("%q true", []string{"a", "a\x00", "a\x01b"})},
		{"any set, a key of another set first", list("", "e", 1, 1000, nil), fmt.Sprintf("%q false", []string{"eu"})},
		{"any set, prefix of keys in two sets", list("", "device-003", 5, 1000, nil), all("device-003")},
		{"any set, match", list("", "", 100, 1000, func(k string) bool { return strings.HasSuffix(k, "3") }), all("device-003")},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	// Every set's keys from the rows that repeat them all (an index of version 2): the same
	// answers as set by set.
	for _, c := range []struct {
		prefix string
		limit  int
		match  func(string) bool
	}{{"", 100, nil}, {"device-00", 2, nil}, {"", 3, nil}, {"e", 1, nil}, {"device-003", 5, nil},
		{"", 100, func(k string) bool { return strings.HasSuffix(k, "3") }}} {
		bySet := list("", c.prefix, c.limit, 1000, c.match)
		keys, more, err := keyindex.List(ctx, s.st, keyindex.Listing{Table: s.agg.Name, Family: "d", Prefix: c.prefix, Limit: c.limit,
			MaxExamined: 1000, Match: c.match, EverySet: true})
		if got := fmt.Sprintf("%q %v", keys, more); err != nil || got != bySet {
			t.Errorf("every set's keys, prefix %q limit %d, in one scan: %s %v; set by set: %s", c.prefix, c.limit, got, err, bySet)
		}
	}
	keys, _, err := keyindex.List(ctx, s.st, keyindex.Listing{Table: s.agg.Name, Family: "d", Set: "minute", Limit: 100, MaxExamined: 3, Match: func(string) bool { return false }})
	if !errors.Is(err, keyindex.ErrTooMany) || len(keys) != 0 {
		t.Fatalf("bound of 3 rows, none matching: %q %v", keys, err)
	}
	keys, _, err = keyindex.List(ctx, s.st, keyindex.Listing{Table: s.agg.Name, Family: "d", Set: "minute", Limit: 100, MaxExamined: 3})
	if !errors.Is(err, keyindex.ErrTooMany) || len(keys) != 3 {
		t.Fatalf("bound of 3 rows: %q %v, want the 3 found and ErrTooMany", keys, err)
	}
}

// TestMarkerOutlivesTTL: the marker is written where a TTL cannot expire it, and writing it again
// rewrites the same cell.
func TestMarkerOutlivesTTL(t *testing.T) {
	ctx := context.Background()
	st, err := cellstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	agg := schema.TableLayout{Name: "agg", Family: "d", SaltBuckets: 2, TTL: time.Hour}
	if err := st.EnsureTable(ctx, schema.KeyIndexLayout(agg)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := keyindex.MarkComplete(ctx, st, agg); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	err = st.Scan(ctx, store.ScanSpec{Table: schema.KeyIndexTable("agg"), MaxVersions: 10}, func(_ []byte, cells []store.Cell) bool {
		n += len(cells)
		return true
	})
	if err != nil || n != 1 {
		t.Fatalf("marker written twice: %d versions (%v)", n, err)
	}
	if ok, err := keyindex.Complete(ctx, st, "agg", "d"); !ok || err != nil {
		t.Fatalf("Complete: %v %v", ok, err)
	}
}
