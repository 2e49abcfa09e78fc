package opentsdb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// aggregateSeries combines a group's series at each timestamp where one of them has a value.
func aggregateSeries(g []series, fn aggFunc) []point {
	if len(g) == 1 {
		return g[0].pts
	}
	byT := map[int64][]float64{}
	for _, s := range g {
		for _, p := range s.pts {
			if !math.IsNaN(p.v) {
				byT[p.t] = append(byT[p.t], p.v)
			} else if _, ok := byT[p.t]; !ok {
				byT[p.t] = nil // a filled empty bucket stays empty unless a series has a value
			}
		}
	}
	out := make([]point, 0, len(byT))
	for t, vals := range byT {
		v := math.NaN()
		if len(vals) > 0 {
			v = fn(vals)
		}
		out = append(out, point{t, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].t < out[j].t })
	return out
}

// TestFoldEqualsAggregatingAtOnce: a group folded a series at a time answers what aggregating all
// its series at once answers, to the bit, for every aggregator, with empty (NaN) buckets, one
// series, many, and timestamps some series lack: the wildcard path holds no more than the groups
// and gives the same numbers.
func TestFoldEqualsAggregatingAtOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range aggregatorNames() {
		if name == "none" {
			continue
		}
		fn := aggregators[name]
		for round := range 200 {
			var all []series
			for range 1 + rng.IntN(6) {
				var s series
				s.tags = map[string]string{"entity": fmt.Sprint("e", rng.IntN(100))}
				for ts := int64(0); ts < 20; ts++ {
					switch rng.IntN(4) {
					case 0: // no point here
					case 1:
						s.pts = append(s.pts, point{ts * 60_000, math.NaN()})
					default:
						s.pts = append(s.pts, point{ts * 60_000, math.Round(rng.NormFloat64()*1e6) / 1e3})
					}
				}
				if rng.IntN(4) == 0 && len(s.pts) > 0 {
					// Out of time order, and a timestamp twice: the fold sorts, keeping the order
					// of a timestamp's values.
					s.pts = append(s.pts, point{s.pts[rng.IntN(len(s.pts))].t, float64(rng.IntN(1000))})
					rng.Shuffle(len(s.pts), func(i, j int) { s.pts[i], s.pts[j] = s.pts[j], s.pts[i] })
				}
				all = append(all, s)
			}
			f := newFolder(&subQuery{aggregator: name}, fn, 1<<30)
			for _, s := range all {
				if err := f.add(s); err != nil {
					t.Fatal(err)
				}
			}
			got := f.results()
			if len(got) != 1 {
				t.Fatalf("%s: %d groups, want 1 (no group-by)", name, len(got))
			}
			want := aggregateSeries(all, fn)
			if !samePoints(got[0].pts, want) {
				t.Fatalf("%s round %d, %d series:\nfolded %v\nat once %v", name, round, len(all), got[0].pts, want)
			}
			if len(got[0].tags) != len(all) {
				t.Fatalf("%s: the group keeps %d series' tags, want %d", name, len(got[0].tags), len(all))
			}
		}
	}
}

// TestFoldGroupsAndNone: group-by keys split the series as groupSeries did (in key order), and
// aggregator none answers every series on its own, in order.
func TestFoldGroupsAndNone(t *testing.T) {
	mk := func(region string, v float64) series {
		return series{tags: map[string]string{"region": region}, pts: []point{{0, v}}}
	}
	f := newFolder(&subQuery{aggregator: "sum", filters: []tagFilter{{Tagk: "region", GroupBy: true}}}, aggregators["sum"], 100)
	for _, s := range []series{mk("us", 1), mk("eu", 2), mk("us", 3)} {
		if err := f.add(s); err != nil {
			t.Fatal(err)
		}
	}
	got := f.results()
	if len(got) != 2 || got[0].pts[0].v != 2 || got[1].pts[0].v != 4 {
		t.Fatalf("grouped by region: %+v, want eu=2 then us=4", got)
	}
	none := newFolder(&subQuery{aggregator: "none"}, nil, 100)
	for _, s := range []series{mk("us", 1), mk("eu", 2), mk("us", 3)} {
		if err := none.add(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := none.results(); len(got) != 3 || got[0].pts[0].v != 1 || got[1].pts[0].v != 2 || got[2].pts[0].v != 3 {
		t.Fatalf("aggregator none: %+v, want the three series in order", got)
	}
	// Series answered on their own count against the answer's points as they come.
	small := newFolder(&subQuery{aggregator: "none"}, nil, 2)
	for i, s := range []series{mk("a", 1), mk("b", 2), mk("c", 3)} {
		err := small.add(s)
		if (err != nil) != (i == 2) {
			t.Fatalf("series %d of one point each under a limit of 2: %v", i+1, err)
		}
	}
}

func samePoints(a, b []point) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].t != b[i].t || math.Float64bits(a[i].v) != math.Float64bits(b[i].v) && !(math.IsNaN(a[i].v) && math.IsNaN(b[i].v)) {
			return false
		}
	}
	return true
}

// TestDownsampleOfOnePointIsThePoint: buckets of one point take the point itself (minute windows
// in 1m buckets) only for the aggregators whose value over one point is that point's, to the bit
// (a sum turns -0 into 0); the answer is the aggregator's over the bucket either way.
func TestDownsampleOfOnePointIsThePoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, name := range aggregatorNames() {
		if name == "none" {
			continue
		}
		fn := aggregators[name]
		var pts []point
		for ts := int64(0); ts < 200; ts++ {
			switch rng.IntN(5) {
			case 0:
			case 1:
				pts = append(pts, point{ts * 60_000, math.Copysign(0, -1)})
			case 2: // a second point in the bucket
				pts = append(pts, point{ts * 60_000, rng.NormFloat64()}, point{ts*60_000 + 30_000, rng.NormFloat64()})
			default:
				pts = append(pts, point{ts * 60_000, rng.NormFloat64()})
			}
		}
		got := downsample(pts, &downsampleSpec{interval: 60_000, agg: name, fill: "none"}, 0, 200*60_000)
		var want []point
		for i := 0; i < len(pts); {
			j := i + 1
			for j < len(pts) && pts[j].t/60_000 == pts[i].t/60_000 {
				j++
			}
			var vals []float64
			for _, p := range pts[i:j] {
				vals = append(vals, p.v)
			}
			want = append(want, point{pts[i].t / 60_000 * 60_000, fn(vals)})
			i = j
		}
		if !samePoints(got, want) {
			t.Fatalf("%s: downsampled %v\nwant %v", name, got, want)
		}
	}
}
