package query

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/totals"
)

// TestLongReadsSplitAnswerAsOne: once a reader has seen a set's windows a minute apart, a read of
// at least twice as many as one round trip carries (splitRows) is read in parts at once, up to
// splitParts, and answers what one scan does: over ranges that cut windows, with gaps, with
// neighbours' rows on both sides, oldest or newest first, every aggregate or some. A read with a
// limit or without a start is one scan, and a budget too small stops the parts as it stops one.
func TestLongReadsSplitAnswerAsOne(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, table := open(t)
			rng := rand.New(rand.NewPCG(5, 8))
			t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
			const minutes = 4500
			var recs []totals.Record
			for _, e := range []string{"dev-1", "dev-2", "dev-3"} { // dev-2's rows lie between the others'
				for m := range minutes {
					if rng.IntN(9) == 0 {
						continue // a window the table lacks
					}
					start := t0.Add(time.Duration(m) * time.Minute)
					r := totals.Record{Topology: "t", Set: "minute", Entity: e, Start: start.UnixMilli(), End: start.Add(time.Minute).UnixMilli(),
						Final: m < minutes-5, Revision: uint64(m + 1), Values: []totals.Value{
							{Name: "count", Kind: totals.KindInt, Int: int64(m)},
							{Name: "q", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{{Q: 0.5, Value: float64(m) / 2}}}}}
					if rng.IntN(3) > 0 {
						r.Values = append(r.Values, totals.Value{Name: "max", Kind: totals.KindFloat, Float: rng.NormFloat64()})
					}
					recs = append(recs, r)
				}
			}
			querytest.WriteTotals(t, st, table, 4, recs)
			src := &querytest.CountingSource{Source: st, Only: table}
			newReader := func() *Reader {
				r, err := NewReader(ctx, src, table, "d")
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			r := newReader()
			read := func(r *Reader, o Options) ([]Window, int) {
				t.Helper()
				src.Reset()
				ws, err := r.Windows(ctx, "minute", "dev-2", o)
				if err != nil {
					t.Fatal(err)
				}
				return ws, src.Counts().Scans
			}
			whole := Options{From: t0, To: t0.Add(minutes * time.Minute)}
			first, scans := read(r, whole)
			if scans != 1 {
				t.Fatalf("a set's first read took %d scans: nothing is known of its windows yet", scans)
			}
			again, scans := read(r, whole)
			if scans != splitParts {
				t.Fatalf("%d minutes read in %d scans, want %d", minutes, scans, splitParts)
			}
			sameWindows(t, "split", again, first)

			for i := range 12 {
				from := t0.Add(time.Duration(rng.Int64N(int64(minutes * time.Minute / 3))))
				o := Options{From: from, To: from.Add(time.Duration(rng.Int64N(int64(minutes*time.Minute-from.Sub(t0))) + 1)),
					OldestFirst: i%2 == 0}
				if i%3 == 0 {
					o.Aggregates = []string{"q", "max"}
				}
				want, _ := read(newReader(), o) // a reader that has seen nothing reads in one scan
				got, scans := read(r, o)
				rows := o.To.Sub(o.From).Milliseconds() / 60_000
				if wantScans := max(1, int(min(splitParts, rows/splitRows))); scans != wantScans {
					t.Fatalf("%s of windows read in %d scans, want %d", o.To.Sub(o.From), scans, wantScans)
				}
				sameWindows(t, fmt.Sprintf("range %d (%s, oldest first %v)", i, o.To.Sub(o.From), o.OldestFirst), got, want)
			}

			if _, scans := read(r, Options{From: t0, To: whole.To, Limit: 3000}); scans != 1 {
				t.Fatalf("a read with a limit took %d scans", scans)
			}
			if _, scans := read(r, Options{To: whole.To}); scans != 1 {
				t.Fatalf("a read without a start took %d scans", scans)
			}
			o := whole
			o.Budget = NewBudget(2000)
			if _, err := r.Windows(ctx, "minute", "dev-2", o); !errors.Is(err, ErrBudget) {
				t.Fatalf("a split read of more windows than its budget: %v", err)
			}
		})
	}
}
