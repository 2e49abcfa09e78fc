package query

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
)

// TestManyEntitiesInOneScanAnswerAsOneEach: ManyColumns reads the entities of a salt bucket in one
// scan (HBase's MultiRowRangeFilter on the real server), after what the cache holds of each, which
// differs from entity to entity. Every answer is the one reading each entity alone gives, with
// and without a cache, with the aggregates named or not, with live windows, through a coarser set
// or not, over ranges that cut entities' windows and entities with none; and it takes one scan per
// bucket (two through a coarser set: its windows, then the finer set's), not per entity.
func TestManyEntitiesInOneScanAnswerAsOneEach(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, table := open(t)
			enc := querytest.KeyIndexed(t, st, table)
			rng := rand.New(rand.NewPCG(11, 12))
			now := time.Now().Truncate(time.Minute)
			t0 := now.Add(-3 * time.Hour)
			var entities []string
			var cells []store.Cell
			for e := range 30 {
				name := fmt.Sprintf("dev-%02d", e)
				entities = append(entities, name)
				if e%7 == 3 {
					continue // an entity with no windows at all
				}
				for m := range 180 {
					if rng.IntN(4) == 0 {
						continue
					}
					start := t0.Add(time.Duration(m) * time.Minute)
					r := totals.Record{Topology: "t", Set: "minute", Entity: name, Start: start.UnixMilli(), End: start.Add(time.Minute).UnixMilli(),
						Final: m < 170, Revision: uint64(m + 1), Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: int64(e*1000 + m)}}}
					if rng.IntN(3) > 0 { // an aggregate some windows lack
						r.Values = append(r.Values, totals.Value{Name: "max", Kind: totals.KindFloat, Float: rng.NormFloat64()})
					}
					var err error
					if cells, err = enc.Encode(&kgo.Record{Value: r.Encode()}, cells); err != nil {
						t.Fatal(err)
					}
				}
				// A 10-minute coarser set: most periods final and whole, some open or missing.
				for m := 0; m < 180; m += 10 {
					if rng.IntN(5) == 0 {
						continue
					}
					start := t0.Add(time.Duration(m) * time.Minute)
					r := totals.Record{Topology: "t", Set: "ten", Entity: name, Start: start.UnixMilli(), End: start.Add(10 * time.Minute).UnixMilli(),
						Final: m < 160 && rng.IntN(6) > 0, Revision: 1, Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: int64(-m)}}}
					var err error
					if cells, err = enc.Encode(&kgo.Record{Value: r.Encode()}, cells); err != nil {
						t.Fatal(err)
					}
				}
				// A window of another set of the same entity, between its rows in the table: a
				// scan over the range of several entities must not take it.
				r := totals.Record{Topology: "t", Set: "minutf", Entity: name, Start: t0.UnixMilli(), End: t0.Add(time.Minute).UnixMilli(),
					Final: true, Revision: 1, Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}}
				var err error
				if cells, err = enc.Encode(&kgo.Record{Value: r.Encode()}, cells); err != nil {
					t.Fatal(err)
				}
			}
			if failed, err := st.Write(ctx, cells); err != nil || len(failed) > 0 {
				t.Fatalf("write: %v %v", failed, err)
			}
			live := fakeLive{}
			for _, e := range entities[:5] {
				s := now.Add(-time.Minute)
				live["minute/"+e] = []Window{{Entity: e, Set: "minute", Start: s, End: s.Add(time.Minute), Revision: 1000,
					Values: map[string]totals.Value{"count": {Name: "count", Kind: totals.KindInt, Int: -1}}}}
			}
			src := &querytest.CountingSource{Source: st, Only: table} // the epochs and the index's marker are read now and then
			plain := newReader(t, st, table)
			cache := NewCache(0) // epochs read every 2 s: nothing is written while it reads
			cached := newReader(t, src, table).WithCache(cache)
			// Some entities' early hours read and cached first: each entity's cached part differs.
			for i, e := range entities {
				if i%3 == 0 {
					o := Options{From: t0.Add(time.Duration(i) * time.Minute), To: t0.Add(90 * time.Minute)}
					if _, err := cached.Columns(ctx, "minute", e, o); err != nil {
						t.Fatal(err)
					}
				}
			}
			ranges := []Options{
				{From: t0, To: now.Add(time.Minute)},
				{From: t0.Add(30*time.Minute + 30*time.Second), To: now.Add(-7 * time.Minute)},
				{From: t0.Add(time.Hour), Aggregates: []string{"max"}},
				{From: t0.Add(7 * time.Minute), To: t0.Add(2 * time.Hour), Aggregates: []string{"count", "max"}},
				{From: t0.Add(-time.Hour), To: t0.Add(-30 * time.Minute)}, // before every window
			}
			for _, withLive := range []bool{false, true} {
				for ri, o := range ranges {
					readers := map[string]*Reader{"no cache": plain, "cache": cached}
					for rn, r := range readers {
						if withLive {
							r = r.WithLive(live)
						}
						one := *r
						one.noBatch = true
						src.Reset()
						asked := entities
						if ri == 1 { // an entity named twice, out of order: answered both times
							asked = append([]string{entities[4]}, entities...)
							asked[5], asked[9] = asked[9], asked[5]
						}
						var coarse *Coarse
						if ri%2 == 0 && o.Aggregates == nil || ri == 3 {
							coarse = &Coarse{Set: "ten", Size: 10 * time.Minute, Aggregates: []string{"count"}}
							if ri == 3 {
								o.Aggregates = []string{"count"}
							}
						}
						got, err := r.ManyColumns(ctx, "minute", coarse, asked, o)
						if err != nil {
							t.Fatal(err)
						}
						scans := src.Counts().Scans
						want, err := one.ManyColumns(ctx, "minute", coarse, asked, o)
						if err != nil {
							t.Fatal(err)
						}
						for i, e := range asked {
							if g, w := windowsText(got[i].Windows(false)), windowsText(want[i].Windows(false)); g != w {
								t.Fatalf("%s, live %v, range %d, %s: read with the others\n%s\nalone\n%s", rn, withLive, ri, e, g, w)
							}
						}
						if rn == "cache" && scans > 8 {
							t.Fatalf("range %d: %d scans for %d entities in 4 buckets", ri, scans, len(entities))
						}
					}
				}
			}
		})
	}
}

// TestInRanges: a row is in sorted ranges [Start, Stop) (a nil Stop unbounded) as a walk over
// them says.
func TestInRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 500 {
		var ranges []store.RowRange
		at := byte(0)
		for range rng.IntN(5) {
			at += byte(1 + rng.IntN(20))
			r := store.RowRange{Start: []byte{at}}
			at += byte(1 + rng.IntN(20))
			r.Stop = []byte{at}
			ranges = append(ranges, r)
		}
		if len(ranges) > 0 && rng.IntN(3) == 0 {
			ranges[len(ranges)-1].Stop = nil
		}
		for x := range 256 {
			row := []byte{byte(x), byte(rng.IntN(2))}
			want := len(ranges) == 0
			for _, r := range ranges {
				if string(row) >= string(r.Start) && (r.Stop == nil || string(row) < string(r.Stop)) {
					want = true
				}
			}
			if got := store.InRanges(row, ranges); got != want {
				t.Fatalf("%x in %v: %v, want %v", row, ranges, got, want)
			}
		}
	}
}
