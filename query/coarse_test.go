package query

import (
	"context"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/totals"
)

// TestCoarsenedReadsTheRestFromTheFinerSet: an entity's minutes over fourteen hours, and hourly
// windows for the twelve in the middle, every other one not final yet (an early total): Coarsened
// over a range that starts and ends off the hour takes the six final hours and reads the minutes
// of the range's edges and of the six other hours in one scan (more than maxGapScans gaps),
// leaving out the minutes the final hours answer. Its hour sums equal the minutes', in order. On
// the embedded store and the real HBase.
func TestCoarsenedReadsTheRestFromTheFinerSet(t *testing.T) {
	const hours = 12
	var recs []totals.Record
	count := func(n int64) []totals.Value { return []totals.Value{{Name: "count", Kind: totals.KindInt, Int: n}} }
	from, to := querytest.T0.Add(-30*time.Minute), querytest.T0.Add(hours*time.Hour+17*time.Minute)
	hourSums := make([]int64, hours)
	var inRange int64
	for m := -60; m < (hours+1)*60; m++ {
		start := querytest.T0.Add(time.Duration(m) * time.Minute)
		n := int64((m+60)%7 + 1)
		if m >= 0 && m < hours*60 {
			hourSums[m/60] += n
		}
		if !start.Before(from) && start.Before(to) {
			inRange += n
		}
		recs = append(recs, totals.Record{Topology: "t", Set: "minute", Entity: "e", Start: start.UnixMilli(),
			End: start.UnixMilli() + 60_000, Final: true, Revision: uint64(n), Values: count(n)})
	}
	for h := range hours {
		start := querytest.T0.Add(time.Duration(h) * time.Hour).UnixMilli()
		recs = append(recs, totals.Record{Topology: "t", Set: "hour", Entity: "e", Start: start, End: start + 3_600_000,
			Final: h%2 == 0, Revision: uint64(hourSums[h]), Values: count(hourSums[h])})
	}
	c := Coarse{Set: "hour", Size: time.Hour, Aggregates: []string{"count"}}
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.WriteTotals(t, st, table, 4, recs)
			counting := &querytest.CountingSource{Source: st}
			r := newReader(t, counting, table)
			counting.Reset()
			ws, err := r.Coarsened(context.Background(), "minute", c, "e", Options{From: from, To: to, OldestFirst: true, Aggregates: []string{"count"}})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]int64, hours)
			var total int64
			hourly, last := 0, int64(0)
			for _, w := range ws {
				s := w.Start.UnixMilli()
				if s < last {
					t.Fatalf("window at %v after one at %v: not oldest first", w.Start, time.UnixMilli(last))
				}
				last = s
				if w.Set == "hour" {
					hourly++
				}
				n := w.Values["count"].Int
				total += n
				if h := w.Start.Sub(querytest.T0) / time.Hour; w.Start.After(querytest.T0.Add(-time.Nanosecond)) && h < hours {
					got[h] += n
				}
			}
			for h := range hours {
				if got[h] != hourSums[h] {
					t.Errorf("hour %d: %d counted, the minutes hold %d", h, got[h], hourSums[h])
				}
			}
			if total != inRange {
				t.Errorf("%d counted over the range, the minutes in it hold %d", total, inRange)
			}
			if want := hours/2 + hours/2*60 + 30 + 17; hourly != hours/2 || len(ws) != want {
				t.Errorf("%d windows, %d of them hourly: want %d, the %d final hours and the minutes of the rest", len(ws), hourly, want, hours/2)
			}
			if n := counting.Counts().Scans; n != 2 {
				t.Errorf("%d scans, want 2: the hours, then the minutes of every gap at once", n)
			}
		})
	}
}
