package opentsdb

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"time"
)

type downsampleSpec struct {
	interval int64 // ms; 0 for "all": one bucket over the whole range
	agg      string
	fill     string // none, nan, null or zero
}

var downsampleRE = regexp.MustCompile(`^(\d+)(ms|s|m|h|d|w|n|y|all)(c?)-([A-Za-z0-9]*)(?:-([a-z]+))?$`)

// parseDownsample reads <n><unit>-<aggregator>[-<fill policy>] and 0all-<aggregator>.
func parseDownsample(s string) (*downsampleSpec, error) {
	m := downsampleRE.FindStringSubmatch(s)
	if m == nil {
		return nil, errors.New("want <interval><unit>-<aggregator>[-<fill policy>], e.g. 1m-avg or 5m-sum-zero")
	}
	ds := &downsampleSpec{agg: m[4], fill: m[5]}
	if m[3] == "c" {
		return nil, errors.New("calendar downsampling is not supported: abacus downsamples on UTC boundaries; drop the c")
	}
	if ds.agg == "" { // Grafana leaves it empty when a saved query has no aggregator: its editor shows avg
		ds.agg = "avg"
	}
	if _, ok := aggregators[ds.agg]; !ok || ds.agg == "none" {
		return nil, fmt.Errorf("unknown downsampling aggregator %q (/api/aggregators lists them; none cannot downsample)", ds.agg)
	}
	switch ds.fill {
	case "":
		ds.fill = "none"
	case "none", "nan", "null", "zero":
	default:
		return nil, fmt.Errorf("unknown fill policy %q: want none, nan, null or zero", ds.fill)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return nil, err
	}
	if m[2] == "all" {
		return ds, nil
	}
	d, _ := unitDuration(m[2])
	if n <= 0 || n > int64(100*365*24*time.Hour/d) {
		return nil, fmt.Errorf("interval %d%s is out of range", n, m[2])
	}
	ds.interval = n * d.Milliseconds()
	if ds.interval <= 0 {
		return nil, fmt.Errorf("interval %d%s is below a millisecond", n, m[2])
	}
	return ds, nil
}

// aggFunc combines values: in time order when downsampling, in series order across series.
type aggFunc func(vals []float64) float64

// aggregators are the aggregators /api/aggregators lists. Without interpolation, mimmin, mimmax and
// zimsum are min, max and sum. dev is the population standard deviation, as OpenTSDB's. Percentiles
// pNN use the estimate OpenTSDB takes from Apache Commons Math (p(n+1)); epNNr3 and epNNr7 use
// Hyndman and Fan's estimates 3 and 7, computed exactly.
var aggregators = func() map[string]aggFunc {
	m := map[string]aggFunc{
		"sum":    sum,
		"zimsum": sum,
		"avg":    func(v []float64) float64 { return sum(v) / float64(len(v)) },
		"min":    minOf,
		"mimmin": minOf,
		"max":    maxOf,
		"mimmax": maxOf,
		"count":  func(v []float64) float64 { return float64(len(v)) },
		"first":  func(v []float64) float64 { return v[0] },
		"last":   func(v []float64) float64 { return v[len(v)-1] },
		"dev": func(v []float64) float64 {
			mean := sum(v) / float64(len(v))
			var ss float64
			for _, x := range v {
				ss += (x - mean) * (x - mean)
			}
			return math.Sqrt(ss / float64(len(v)))
		},
		"squareSum": func(v []float64) float64 {
			var s float64
			for _, x := range v {
				s += x * x
			}
			return s
		},
		"none": nil, // no aggregation: every series is answered on its own
	}
	for _, p := range []struct {
		name string
		q    float64
	}{{"50", .5}, {"75", .75}, {"90", .9}, {"95", .95}, {"99", .99}, {"999", .999}} {
		q := p.q
		m["p"+p.name] = func(v []float64) float64 { return percentile(v, q, 0) }
		m["ep"+p.name+"r3"] = func(v []float64) float64 { return percentile(v, q, 3) }
		m["ep"+p.name+"r7"] = func(v []float64) float64 { return percentile(v, q, 7) }
	}
	return m
}()

// ofOne are the aggregators whose value over one point is that point's, to the bit; those that
// sum from zero turn a negative zero into zero, as 0 + x does.
var ofOne = map[string]func(x float64) float64{
	"sum": plusZero, "zimsum": plusZero, "avg": plusZero,
	"min": same, "mimmin": same, "max": same, "mimmax": same, "first": same, "last": same,
}

func plusZero(x float64) float64 { return 0 + x }
func same(x float64) float64     { return x }

func aggregatorNames() []string {
	out := make([]string, 0, len(aggregators))
	for n := range aggregators {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v[1:] {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v[1:] {
		m = math.Max(m, x)
	}
	return m
}

// percentile estimates the q quantile of v: estimate 0 is Commons Math's legacy p(n+1) position,
// 3 and 7 are Hyndman and Fan's types.
func percentile(v []float64, q float64, estimate int) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := float64(len(s))
	at := func(k int) float64 { // 1-based, clamped
		return s[min(max(k, 1), len(s))-1]
	}
	lerp := func(pos float64) float64 {
		if pos < 1 {
			return s[0]
		}
		if pos >= n {
			return s[len(s)-1]
		}
		k := math.Floor(pos)
		return at(int(k)) + (pos-k)*(at(int(k)+1)-at(int(k)))
	}
	switch estimate {
	case 3:
		j := math.Floor(n*q - 0.5)
		g := n*q - 0.5 - j
		if g == 0 && int(j)%2 == 0 {
			return at(int(j))
		}
		return at(int(j) + 1)
	case 7:
		return lerp((n-1)*q + 1)
	}
	return lerp(q * (n + 1))
}

func floorTo(t, interval int64) int64 {
	r := t % interval
	if r < 0 {
		r += interval
	}
	return t - r
}

// downsample folds a series' points (in time order) into buckets aligned on multiples of the
// interval since the epoch, each stamped with its start; fill policies add the empty buckets
// between start and end.
func downsample(pts []point, ds *downsampleSpec, start, end int64) []point {
	fn := aggregators[ds.agg]
	if ds.interval == 0 {
		if len(pts) == 0 {
			return nil
		}
		vals := make([]float64, len(pts))
		for i, p := range pts {
			vals[i] = p.v
		}
		return []point{{start, fn(vals)}}
	}
	emptyValue, fill := 0.0, ds.fill != "none"
	n := len(pts) // buckets at most, without a fill policy
	if fill {
		n = int((end-floorTo(start, ds.interval))/ds.interval) + 1 // prepare bounds it by the answer's points
	}
	out := make([]point, 0, max(n, 0))
	if ds.fill == "nan" || ds.fill == "null" {
		emptyValue = math.NaN() // written as null: JSON has no NaN
	}
	next := floorTo(start, ds.interval) // next bucket a fill policy must cover
	one := ofOne[ds.agg]
	var vals []float64
	for i := 0; i < len(pts); {
		b := floorTo(pts[i].t, ds.interval)
		for fill && next < b {
			out = append(out, point{next, emptyValue})
			next += ds.interval
		}
		j := i + 1
		for j < len(pts) && pts[j].t < b+ds.interval {
			j++
		}
		if j == i+1 && one != nil {
			// A bucket of one point (minute windows in 1m buckets: every one of them).
			out = append(out, point{b, one(pts[i].v)})
		} else {
			vals = vals[:0]
			for _, p := range pts[i:j] {
				vals = append(vals, p.v)
			}
			out = append(out, point{b, fn(vals)})
		}
		i = j
		next = b + ds.interval
	}
	for fill && next <= end {
		out = append(out, point{next, emptyValue})
		next += ds.interval
	}
	return out
}

// rate turns values into their change per second, as OpenTSDB's rate option does.
func rate(pts []point, o rateOptions) []point {
	var out []point
	for i := 1; i < len(pts); i++ {
		prev, cur := pts[i-1], pts[i]
		dt := float64(cur.t-prev.t) / 1000
		dv := cur.v - prev.v
		if o.Counter && dv < 0 {
			if o.DropResets {
				continue
			}
			maxV := float64(math.MaxInt64)
			if o.CounterMax != nil {
				maxV = *o.CounterMax
			}
			dv = maxV - prev.v + cur.v
		}
		r := dv / dt
		if o.Counter && o.ResetValue != nil && *o.ResetValue > 0 && r > *o.ResetValue {
			r = 0
		}
		out = append(out, point{cur.t, r})
	}
	return out
}

// toSeconds stamps points with whole seconds; points that fall in one second are combined with
// the query's aggregator (avg for none), as OpenTSDB does without msResolution.
func toSeconds(pts []point, fn aggFunc) []point {
	if fn == nil {
		fn = aggregators["avg"]
	}
	out := pts[:0:0]
	for i := 0; i < len(pts); {
		sec := floorTo(pts[i].t, 1000)
		j := i + 1
		for j < len(pts) && floorTo(pts[j].t, 1000) == sec {
			j++
		}
		v := pts[i].v
		if j-i > 1 {
			vals := make([]float64, 0, j-i)
			for _, p := range pts[i:j] {
				vals = append(vals, p.v)
			}
			v = fn(vals)
		}
		out = append(out, point{sec, v})
		i = j
	}
	return out
}

// commonTags splits a group's tag keys into those every series has with one value, and the others.
func commonTags(g []series) (map[string]string, []string) {
	tags := map[string]string{}
	all := map[string]bool{}
	for k, v := range g[0].tags {
		tags[k] = v
	}
	for _, s := range g {
		for k, v := range s.tags {
			all[k] = true
			if tags[k] != v {
				delete(tags, k)
			}
		}
		for k := range tags {
			if _, ok := s.tags[k]; !ok {
				delete(tags, k)
			}
		}
	}
	aggTags := []string{}
	for k := range all {
		if _, ok := tags[k]; !ok {
			aggTags = append(aggTags, k)
		}
	}
	sort.Strings(aggTags)
	return tags, aggTags
}
