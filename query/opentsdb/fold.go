package opentsdb

import (
	"fmt"
	"math"
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
	byT   map[int64]*foldCell
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
		g.byT = map[int64]*foldCell{}
		f.fold(g, g.first)
		g.first = nil
	}
	g.tags = append(g.tags, series{tags: s.tags})
	if g.byT != nil {
		f.fold(g, s.pts)
	}
	return nil
}

func (f *folder) fold(g *seriesGroup, pts []point) {
	step := foldStep(f.sq.aggregator)
	for _, p := range pts {
		c := g.byT[p.t]
		if c == nil {
			c = &foldCell{}
			if step == nil {
				c.vals = []float64{}
			}
			g.byT[p.t] = c
		}
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
		if g.byT != nil {
			fg.pts = make([]point, 0, len(g.byT))
			for t, c := range g.byT {
				fg.pts = append(fg.pts, point{t, foldValue(f.sq.aggregator, f.agg, c)})
			}
			sort.Slice(fg.pts, func(i, j int) bool { return fg.pts[i].t < fg.pts[j].t })
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
