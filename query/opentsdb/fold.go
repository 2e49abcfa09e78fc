package opentsdb

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// folder builds one sub-query's answer while its entities are read, a chunk at a time: each
// entity's series are filtered and downsampled at once and folded into their group, so that a
// wildcard over any number of entities holds its groups' points, never every entity's windows.
// The answer is the one aggregating all the series at once gives (the tests' aggregateSeries), to
// the bit: values meet in the order of the series (the entities in order), and the aggregators
// that cannot fold a value at a time (dev, the percentiles) keep their values until the end.
type folder struct {
	sq        *subQuery
	agg       aggFunc // nil: aggregator none, every series answered on its own
	keys      []string
	groups    map[string]*seriesGroup
	n         int // series folded
	points    int // points held by groups of one series (what a non-aggregated answer returns)
	maxPoints int
}

// seriesGroup is a group of series folding into one answered series.
type seriesGroup struct {
	tags  []series // the tags of each series (no points): commonTags reads them
	first []point  // the points of the first series: a group of one answers them as they are
	// Once a second series comes, the group folds: a cell per timestamp, in time order (the
	// series are, and share most of their timestamps: a walk, not a lookup per point).
	folding bool
	ts      []int64
	cells   []foldCell
}

// foldCell is what a group holds at one timestamp.
type foldCell struct {
	n    int
	acc  float64
	vals []float64 // only for aggregators that need every value
}

// foldStep says how an aggregator takes one more value, exactly as it would over the list: nil
// for those that need the whole list (dev, percentiles).
func foldStep(name string) func(c *foldCell, x float64) {
	switch name {
	case "sum", "zimsum", "avg":
		return func(c *foldCell, x float64) { c.acc += x }
	case "squareSum":
		return func(c *foldCell, x float64) { c.acc += x * x }
	case "min", "mimmin":
		return extreme(math.Min)
	case "max", "mimmax":
		return extreme(math.Max)
	case "first":
		return func(c *foldCell, x float64) {
			if c.n == 0 {
				c.acc = x
			}
		}
	case "last":
		return func(c *foldCell, x float64) { c.acc = x }
	case "count":
		return func(*foldCell, float64) {}
	}
	return nil
}

// extreme keeps the first value, then pick of it and each next one, as minOf and maxOf do.
func extreme(pick func(a, b float64) float64) func(c *foldCell, x float64) {
	return func(c *foldCell, x float64) {
		if c.n == 0 {
			c.acc = x
		} else {
			c.acc = pick(c.acc, x)
		}
	}
}

// foldValue is a cell's value once every series is in.
func foldValue(name string, fn aggFunc, c *foldCell) float64 {
	switch {
	case c.n == 0:
		return math.NaN()
	case c.vals != nil:
		return fn(c.vals)
	case name == "avg":
		return c.acc / float64(c.n)
	case name == "count":
		return float64(c.n)
	}
	return c.acc
}

func newFolder(sq *subQuery, agg aggFunc, maxPoints int) *folder {
	groupBy := map[string]bool{tagQuantile: true}
	for _, f := range sq.filters {
		if f.GroupBy && f.Tagk != tagFinal {
			groupBy[f.Tagk] = true
		}
	}
	keys := make([]string, 0, len(groupBy))
	for k := range groupBy {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return &folder{sq: sq, agg: agg, keys: keys, groups: map[string]*seriesGroup{}, maxPoints: maxPoints}
}

// add folds one series (already filtered and downsampled). It refuses a series that would make
// the groups of one series hold more points than the answer may.
func (f *folder) add(s series) error {
	key := fmt.Sprintf("%09d", f.n) // aggregator none: a group per series, in order
	f.n++
	if f.agg != nil {
		var b strings.Builder
		for _, gk := range f.keys {
			fmt.Fprintf(&b, "%s=%s\x00", gk, s.tags[gk])
		}
		key = b.String()
	}
	g := f.groups[key]
	if g == nil {
		g = &seriesGroup{first: s.pts}
		f.groups[key] = g
		f.points += len(s.pts)
		if f.points > f.maxPoints {
			return badRequest("the answer has more than %d data points, the limit: downsample to a longer interval, shorten the range or name fewer entities", f.maxPoints)
		}
	} else if len(g.tags) == 1 {
		// A second series: the group is aggregated from now on.
		f.points -= len(g.first)
		g.folding = true
		f.fold(g, g.first)
		g.first = nil
	}
	g.tags = append(g.tags, series{tags: s.tags})
	if g.folding {
		f.fold(g, s.pts)
	}
	return nil
}

func (f *folder) fold(g *seriesGroup, pts []point) {
	if !slices.IsSortedFunc(pts, func(a, b point) int { return cmp.Compare(a.t, b.t) }) {
		pts = slices.Clone(pts)
		slices.SortStableFunc(pts, func(a, b point) int { return cmp.Compare(a.t, b.t) })
	}
	f.addCells(g, pts)
	step := foldStep(f.sq.aggregator)
	i := 0
	for _, p := range pts {
		for g.ts[i] < p.t {
			i++
		}
		c := &g.cells[i]
		if math.IsNaN(p.v) {
			continue // a filled empty bucket stays empty unless a series has a value
		}
		if step == nil {
			c.vals = append(c.vals, p.v)
		} else {
			step(c, p.v)
		}
		c.n++
	}
}

// addCells gives the group a cell for each timestamp of pts (in time order) it has none for.
func (f *folder) addCells(g *seriesGroup, pts []point) {
	missing := 0
	i := 0
	for k, p := range pts {
		if k > 0 && p.t == pts[k-1].t {
			continue
		}
		for i < len(g.ts) && g.ts[i] < p.t {
			i++
		}
		if i == len(g.ts) || g.ts[i] != p.t {
			missing++
		}
	}
	if missing == 0 {
		return
	}
	ts := make([]int64, 0, len(g.ts)+missing)
	cells := make([]foldCell, 0, len(g.ts)+missing)
	i = 0
	for k, p := range pts {
		if k > 0 && p.t == pts[k-1].t {
			continue
		}
		for i < len(g.ts) && g.ts[i] < p.t {
			ts, cells = append(ts, g.ts[i]), append(cells, g.cells[i])
			i++
		}
		if i < len(g.ts) && g.ts[i] == p.t {
			continue
		}
		c := foldCell{}
		if foldStep(f.sq.aggregator) == nil {
			c.vals = []float64{}
		}
		ts, cells = append(ts, p.t), append(cells, c)
	}
	g.ts, g.cells = append(ts, g.ts[i:]...), append(cells, g.cells[i:]...)
}

// results returns the folded groups in key order, each as its answered points and its series'
// tags.
func (f *folder) results() []foldedGroup {
	keys := make([]string, 0, len(f.groups))
	for k := range f.groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]foldedGroup, 0, len(keys))
	for _, k := range keys {
		g := f.groups[k]
		fg := foldedGroup{tags: g.tags, pts: g.first}
		if g.folding {
			fg.pts = make([]point, len(g.ts))
			for i, t := range g.ts {
				fg.pts[i] = point{t, foldValue(f.sq.aggregator, f.agg, &g.cells[i])}
			}
		}
		out = append(out, fg)
	}
	return out
}

// foldedGroup is a group's answer before rate and second stamps: its points and its series' tags.
type foldedGroup struct {
	tags []series
	pts  []point
}
