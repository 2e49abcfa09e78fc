// Package querytest is what the tests of the query packages share: the stores they read (the
// embedded cell store, and the real HBase when it runs) and aggregate tables seeded as the
// aggregates sink writes them. Only tests import it.
package querytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/keyindex"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Minute is a minute in milliseconds, the length of the seeded windows.
const Minute = int64(60_000)

// T0 is the start of the first window SeedTSDB and SeedRollups write.
var T0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// Source is what a query.Reader reads (query.Source, which this package cannot import: the
// reader's own tests use it).
type Source interface {
	store.Reader
	SaltBuckets(ctx context.Context, table string) (int, error)
}

// Store is a store the tests write windows to and read them from.
type Store interface {
	store.Writer
	Source
}

// Stores gives each test the embedded cell store and, when it runs, the real HBase: each opener
// returns a store with an empty aggregate table of 4 salt buckets, family "d", and its name.
func Stores(t *testing.T) map[string]func(t *testing.T) (Store, string) {
	return map[string]func(t *testing.T) (Store, string){
		"cellstore": func(t *testing.T) (Store, string) { return CellStore(t) },
		"hbase": func(t *testing.T) (Store, string) {
			c := testenv.HBaseClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			table := fmt.Sprintf("querytest_%d", time.Now().UnixNano())
			st, err := hbasestore.New(c, hbasestore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			testenv.DropTableAtEnd(t, c, table)
			if err := st.EnsureTable(ctx, schema.TableLayout{Name: table, Family: "d", SaltBuckets: 4}); err != nil {
				t.Fatal(err)
			}
			return st, table
		},
	}
}

// CellStore is the embedded cell store with an empty aggregate table of 4 salt buckets, family
// "d", and its name; it is closed when the test ends.
func CellStore(t testing.TB) (Store, string) {
	s, err := cellstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EnsureTable(context.Background(), schema.TableLayout{Name: "agg", Family: "d", SaltBuckets: 4}); err != nil {
		t.Fatal(err)
	}
	return s, "agg"
}

// WriteTotals writes recs to table (family "d", salted in buckets) as the aggregates sink writes
// them.
func WriteTotals(t testing.TB, st store.Writer, table string, buckets int, recs []totals.Record) {
	t.Helper()
	Encoded(t, st, &sinks.AggregatesEncoder{Table: table, Family: "d", SaltBuckets: buckets}, recs)
}

// KeyIndexed gives a test's aggregate table (4 salt buckets, family "d") a complete key index,
// dropped at the end on the real HBase, and returns the sinks' encoder that keeps it: the query
// cache answers, and entity listings read the index, only over a complete one.
func KeyIndexed(t testing.TB, st Store, table string) *sinks.AggregatesEncoder {
	t.Helper()
	ctx := context.Background()
	agg := schema.TableLayout{Name: table, Family: "d", SaltBuckets: 4}
	if err := st.(store.Tables).EnsureTable(ctx, schema.KeyIndexLayout(agg)); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*hbasestore.Store); ok {
		testenv.DropTableAtEnd(t, testenv.HBaseClient(t), schema.KeyIndexTable(table))
	}
	if err := keyindex.MarkComplete(ctx, st, agg); err != nil {
		t.Fatal(err)
	}
	return &sinks.AggregatesEncoder{Table: table, Family: "d", SaltBuckets: 4, KeyIndex: schema.KeyIndexTable(table)}
}

// Encoded writes recs to st through enc.
func Encoded(t testing.TB, st store.Writer, enc *sinks.AggregatesEncoder, recs []totals.Record) {
	t.Helper()
	var cells []store.Cell
	for _, r := range recs {
		var err error
		if cells, err = enc.Encode(&kgo.Record{Value: r.Encode()}, cells); err != nil {
			t.Fatal(err)
		}
	}
	if failed, err := st.Write(context.Background(), cells); err != nil || len(failed) > 0 {
		t.Fatalf("seed: %v %v", failed, err)
	}
}

// Seed writes windows 0..9 of minute windows (from the epoch) of set minute for entities ab1 and
// ab12; window i of ab1 has count i, max i/2 and quantiles p 0.5 = i and 0.99 = 2i, and is final
// but the last; ab12's counts are 1000+i.
func Seed(t testing.TB, st store.Writer, table string, buckets int) {
	t.Helper()
	var recs []totals.Record
	for _, e := range []string{"ab1", "ab12"} {
		for i := range int64(10) {
			r := totals.Record{Topology: "t", Set: "minute", Entity: e, Start: i * Minute, End: (i + 1) * Minute,
				Final: i < 9, Revision: uint64(i + 1), Values: []totals.Value{
					{Name: "count", Kind: totals.KindInt, Int: i},
					{Name: "max", Kind: totals.KindFloat, Float: float64(i) / 2},
					{Name: "p", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{{Q: 0.5, Value: float64(i)}, {Q: 0.99, Value: float64(i) * 2}}},
				}}
			if e == "ab12" {
				r.Values[0].Int = 1000 + i
			}
			recs = append(recs, r)
		}
	}
	WriteTotals(t, st, table, buckets, recs)
}

// TSDBEntities are the entities SeedTSDB writes: two devices and one that wildcards on device-*
// leave out.
var TSDBEntities = []string{"device-001", "device-002", "other-7"}

// SeedTSDB writes 60 minute windows (T0 + i minutes) per entity of TSDBEntities in set minute of
// topology devices: count = i+1 for device-001, 100+i for device-002 and 1000 for other-7; mean =
// count/10; temp_q has quantiles 0.5 = count and 0.95 = 2*count. Every window is final but the
// last. Set hour holds one window per entity, so that listings must skip rows of other sets.
func SeedTSDB(t testing.TB, st store.Writer, table string, buckets int) {
	t.Helper()
	var recs []totals.Record
	for n, e := range TSDBEntities {
		for i := range int64(60) {
			c := []int64{i + 1, 100 + i, 1000}[n]
			start := T0.Add(time.Duration(i) * time.Minute).UnixMilli()
			recs = append(recs, totals.Record{Topology: "devices", Set: "minute", Entity: e, Start: start, End: start + Minute,
				Final: i < 59, Revision: uint64(c), Values: []totals.Value{
					{Name: "count", Kind: totals.KindInt, Int: c},
					{Name: "mean", Kind: totals.KindFloat, Float: float64(c) / 10},
					{Name: "temp_q", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{{Q: 0.5, Value: float64(c)}, {Q: 0.95, Value: float64(2 * c)}}},
				}})
		}
		recs = append(recs, totals.Record{Topology: "devices", Set: "hour", Entity: e, Start: T0.UnixMilli(), End: T0.Add(time.Hour).UnixMilli(),
			Final: true, Revision: 1, Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 60}}})
	}
	WriteTotals(t, st, table, buckets, recs)
}

// RollupRegions are the keys of the rollup by region that SeedRollups writes.
var RollupRegions = []string{"eu-west", "us-east"}

// SeedRollups writes, as the aggregates sink writes any totals, 10 minute windows from T0 of: the
// entity set minute for device-001 (count 1); the rollup region-minute for eu-west (count 10+i)
// and us-east (count 20+i); and the global rollup fleet-minute under its one key, plan.GlobalKey
// (count 30+i, quantiles temp_q 0.5 = count and 0.99 = 2*count). A rollup's totals are records
// like an entity's, with the rollup key as the entity: the read side must tell them apart by the
// served sets alone.
func SeedRollups(t testing.TB, st store.Writer, table string) {
	t.Helper()
	var recs []totals.Record
	put := func(set, key string, i, c int64, extra ...totals.Value) {
		start := T0.Add(time.Duration(i) * time.Minute).UnixMilli()
		recs = append(recs, totals.Record{Topology: "devices", Set: set, Entity: key, Start: start, End: start + Minute, Final: true, Revision: 1,
			Values: append([]totals.Value{{Name: "count", Kind: totals.KindInt, Int: c}}, extra...)})
	}
	for i := range int64(10) {
		put("minute", "device-001", i, 1)
		put("region-minute", RollupRegions[0], i, 10+i)
		put("region-minute", RollupRegions[1], i, 20+i)
		c := 30 + i
		put("fleet-minute", plan.GlobalKey, i, c, totals.Value{Name: "temp_q", Kind: totals.KindQuantiles,
			Quantiles: []totals.Quantile{{Q: 0.5, Value: float64(c)}, {Q: 0.99, Value: float64(2 * c)}}})
	}
	WriteTotals(t, st, table, 4, recs)
}
