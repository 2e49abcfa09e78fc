package query

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/totals"
)

// randomWindows are n windows of one entity, oldest first, each with a random subset of
// aggregates of every kind (an aggregate added while windows were open is absent from some).
func randomWindows(rng *rand.Rand, n int) []Window {
	var out []Window
	start := int64(1_700_000_000_000)
	for range n {
		start += 60_000 * int64(1+rng.IntN(3))
		w := Window{Entity: "e", Set: "s", Start: time.UnixMilli(start), End: time.UnixMilli(start + 60_000),
			Final: rng.IntN(2) == 0, Revision: rng.Uint64N(1 << 40), Live: rng.IntN(5) == 0, Values: map[string]totals.Value{}}
		if rng.IntN(4) > 0 {
			w.Values["count"] = totals.Value{Name: "count", Kind: totals.KindInt, Int: rng.Int64() - rng.Int64()}
		}
		if rng.IntN(4) > 0 {
			w.Values["max"] = totals.Value{Name: "max", Kind: totals.KindFloat, Float: rng.NormFloat64()}
		}
		if rng.IntN(3) == 0 {
			// Lists of any length: a set's quantiles can change while its windows are kept.
			var qs []totals.Quantile
			for q := range rng.IntN(4) {
				qs = append(qs, totals.Quantile{Q: 0.5 + float64(q)/10, Value: rng.Float64()})
			}
			w.Values["p"] = totals.Value{Name: "p", Kind: totals.KindQuantiles, Quantiles: qs}
		}
		if rng.IntN(3) == 0 {
			w.Values["custom"] = totals.Value{Name: "custom", Kind: totals.KindBytes, Bytes: fmt.Appendf(nil, "x%d", rng.IntN(100))}
		}
		out = append(out, w)
	}
	return out
}

func columnsOf(ws []Window) *Columns {
	c := newColumns("e", "s", nil)
	for _, w := range ws {
		c.addWindow(w)
	}
	return c
}

func sameWindows(t *testing.T, what string, got, want []Window) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	for i := range want {
		want[i].Start, want[i].End = time.UnixMilli(want[i].Start.UnixMilli()), time.UnixMilli(want[i].End.UnixMilli())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// TestColumnsHoldWhatWindowsHold: windows of every value kind, some aggregates absent, go into
// Columns and come back the same, through views, joins of parts whose columns differ, filters and
// cuts.
func TestColumnsHoldWhatWindowsHold(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		ws := randomWindows(rng, rng.IntN(40))
		c := columnsOf(ws)
		sameWindows(t, "round trip", c.Windows(true), slices.Clone(ws))
		newestFirst := slices.Clone(ws)
		slices.Reverse(newestFirst)
		sameWindows(t, "newest first", c.Windows(false), newestFirst)

		// Parts built apart (each with only its own windows' columns), then joined.
		var parts []*Columns
		for i := 0; i < len(ws); {
			j := min(len(ws), i+rng.IntN(6))
			parts = append(parts, columnsOf(ws[i:j]))
			i = j
		}
		sameWindows(t, "joined", concat("e", "s", parts...).Windows(true), slices.Clone(ws))

		if len(ws) > 0 {
			i := rng.IntN(len(ws))
			j := i + rng.IntN(len(ws)-i+1)
			v := c.slice(i, j)
			sameWindows(t, "view", v.Windows(true), slices.Clone(ws[i:j]))
			from, to := ws[i].Start.UnixMilli(), ws[i].Start.UnixMilli()+int64(rng.IntN(600_000))
			var want []Window
			for _, w := range ws {
				if s := w.Start.UnixMilli(); s >= from && s < to {
					want = append(want, w)
				}
			}
			sameWindows(t, "within", c.within(from, to).Windows(true), want)
			// A view joined to another keeps its values, quantiles and custom values included.
			sameWindows(t, "view joined", concat("e", "s", v, columnsOf(nil), c.slice(j, len(ws))).Windows(true), slices.Clone(ws[i:]))
			// What is added to views goes to arrays of their own: neither c nor another view of
			// it sees it.
			late := randomWindows(rng, 3)
			for k := range late {
				late[k].Start = time.UnixMilli(ws[len(ws)-1].Start.UnixMilli() + int64(k+1)*3_600_000)
				late[k].Values["p"] = totals.Value{Name: "p", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{{Q: 0.9, Value: float64(k)}}}
				late[k].Values["custom"] = totals.Value{Name: "custom", Kind: totals.KindBytes, Bytes: fmt.Appendf(nil, "late%d", k)}
			}
			v1, v2 := c.slice(0, len(ws)), c.slice(0, len(ws))
			v1.addWindow(late[0])
			v2.addWindow(late[1])
			v2.addWindow(late[2])
			sameWindows(t, "a view added to", v1.Windows(true), append(slices.Clone(ws), late[0]))
			sameWindows(t, "another view added to", v2.Windows(true), append(slices.Clone(ws), late[1], late[2]))
			sameWindows(t, "the columns of views added to", c.Windows(true), slices.Clone(ws))
		}

		keepOdd := func(i int) bool { return c.revs[i]%2 == 1 }
		var odd []Window
		for _, w := range ws {
			if w.Revision%2 == 1 {
				odd = append(odd, w)
			}
		}
		sameWindows(t, "filter", c.filter(keepOdd).Windows(true), odd)

		n := rng.IntN(len(ws) + 2)
		want := slices.Clone(ws[:min(n, len(ws))])
		if n == 0 {
			want = slices.Clone(ws)
		}
		sameWindows(t, "cut oldest", c.cut(n, true).Windows(true), want)
		want = slices.Clone(ws[max(0, len(ws)-n):])
		if n == 0 {
			want = slices.Clone(ws)
		}
		sameWindows(t, "cut newest", c.cut(n, false).Windows(true), want)
	}
}

// TestMergeLiveAddsAndReplaces: open windows from the processors take the place of stored ones
// that are not final and behind them, and add those the table lacks, in start order.
func TestMergeLiveAddsAndReplaces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	stored := randomWindows(rng, 30)
	for i := range stored {
		stored[i].Live = false
	}
	var live []Window
	for i, w := range stored {
		if i%4 == 0 {
			lw := w
			lw.Revision = w.Revision + uint64(rng.IntN(3)) - 1
			lw.Values = map[string]totals.Value{"count": {Name: "count", Kind: totals.KindInt, Int: int64(i)}}
			live = append(live, lw)
		}
	}
	last := stored[len(stored)-1].Start.UnixMilli()
	for k := range 3 { // windows newer than any stored, and one in a gap
		s := last + int64(k+1)*60_000
		live = append(live, Window{Entity: "e", Set: "s", Start: time.UnixMilli(s), End: time.UnixMilli(s + 60_000), Revision: 1,
			Values: map[string]totals.Value{"max": {Name: "max", Kind: totals.KindFloat, Float: float64(k)}}})
	}
	gap := stored[5].Start.Add(30 * time.Second)
	live = append(live, Window{Entity: "e", Set: "s", Start: gap, End: gap.Add(time.Minute), Revision: 2, Values: map[string]totals.Value{}})
	o := Options{To: time.UnixMilli(last + 2*60_000 + 1)} // the newest live window is out of range
	got := mergeLive(columnsOf(stored), live, o).Windows(true)

	want := slices.Clone(stored)
	byStart := map[int64]int{}
	for i, w := range want {
		byStart[w.Start.UnixMilli()] = i
	}
	for _, lw := range live {
		if !lw.Start.Before(o.To) {
			continue
		}
		lw.Live = true
		if i, ok := byStart[lw.Start.UnixMilli()]; ok {
			if !stored[i].Final && lw.Revision > stored[i].Revision {
				want[i] = lw
			}
			continue
		}
		want = append(want, lw)
	}
	slices.SortStableFunc(want, func(a, b Window) int { return a.Start.Compare(b.Start) })
	replaced := 0
	for i := range want {
		if want[i].Live {
			replaced++
		}
	}
	if replaced < 4 {
		t.Fatalf("the test replaces or adds only %d windows", replaced)
	}
	sameWindows(t, "merged", got, want)
}
