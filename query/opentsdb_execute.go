package query

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/totals"
)

type point struct {
	t int64 // ms
	v float64
}

type series struct {
	tags map[string]string
	pts  []point
}

// tsdbResult is one answered series.
type tsdbResult struct {
	metric  string
	tags    map[string]string
	aggTags []string
	pts     []point
	query   *subQuery
}

// reqState is what one request has read and may still read.
type reqState struct {
	windowsLeft int
	pointsLeft  int
	read        map[string][]Window // by topology, set and entity: sub-queries share reads
}

func (a *tsdbAPI) query(r *http.Request) (any, error) {
	req, err := a.parseQuery(r)
	if err != nil {
		return nil, err
	}
	st := &reqState{windowsLeft: a.limits.MaxWindows, pointsLeft: a.limits.MaxPoints, read: map[string][]Window{}}
	var results []tsdbResult
	for i := range req.queries {
		res, err := a.run(r.Context(), st, req, &req.queries[i])
		if err != nil {
			return nil, err
		}
		results = append(results, res...)
	}
	return rawJSON(encodeResults(req, results)), nil
}

func (a *tsdbAPI) run(ctx context.Context, st *reqState, req *tsdbRequest, sq *subQuery) ([]tsdbResult, error) {
	met, err := a.metric(sq.metric)
	if err != nil {
		return nil, err
	}
	if sq.aggregator == "" {
		sq.aggregator = "sum" // what Grafana's editor shows for a query saved without one
	}
	agg, ok := aggregators[sq.aggregator]
	if !ok {
		return nil, badRequest("queries[%d]: unknown aggregator %q (/api/aggregators lists them)", sq.index, sq.aggregator)
	}
	ents, err := a.entities(ctx, met, sq.filters, a.limits.MaxEntities, true)
	if err != nil {
		return nil, err
	}
	var finalFilters []tagFilter
	for _, f := range sq.filters {
		if f.Tagk == tagFinal {
			if f.Type == "not_key" {
				return nil, badRequest("queries[%d]: final is a pseudo key on every window; not_key cannot apply to it", sq.index)
			}
			finalFilters = append(finalFilters, f)
		}
	}
	// Raw series: one per entity, or per entity and quantile.
	var raw []series
	for _, e := range ents.list {
		ws, err := a.read(ctx, st, met, e, req.start, req.end)
		if err != nil {
			return nil, err
		}
		byTags := map[string]*series{}
		var order []string
		for _, w := range ws {
			final := strconv.FormatBool(w.Final)
			keep := true
			for _, f := range finalFilters {
				keep = keep && f.match(final)
			}
			v, ok := w.Values[met.agg]
			if !keep || !ok {
				continue
			}
			add := func(tags map[string]string, x float64) {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return
				}
				k := tags[tagQuantile]
				s := byTags[k]
				if s == nil {
					s = &series{tags: tags}
					byTags[k] = s
					order = append(order, k)
				}
				s.pts = append(s.pts, point{w.Start.UnixMilli(), x})
			}
			switch v.Kind {
			case totals.KindQuantiles:
				for _, q := range v.Quantiles {
					add(map[string]string{tagEntity: e, tagQuantile: formatQuantile(q.Q)}, q.Value)
				}
			case totals.KindInt, totals.KindFloat:
				add(map[string]string{tagEntity: e}, v.Number())
			}
		}
		sort.Strings(order)
		for _, k := range order {
			if s := byTags[k]; matchSeries(sq.filters, s.tags, sq.explicitTags) {
				raw = append(raw, *s)
			}
		}
	}
	// Downsample each series, bounded beforehand when a fill policy makes every bucket a point.
	if ds := sq.downsample; ds != nil {
		if ds.fill != "none" && ds.interval > 0 {
			buckets := (req.end.UnixMilli()-floorTo(req.start.UnixMilli(), ds.interval))/ds.interval + 1
			if buckets*int64(max(len(raw), 1)) > int64(st.pointsLeft) {
				return nil, badRequest("queries[%d]: downsample %s with fill %s over this range makes %d points per series, more than the limit of %d points: use a longer interval or a shorter range",
					sq.index, sq.dsText, ds.fill, buckets, a.limits.MaxPoints)
			}
		}
		for i := range raw {
			raw[i].pts = downsample(raw[i].pts, ds, req.start.UnixMilli(), req.end.UnixMilli())
		}
	}
	// Group: by the group-by keys of the filters, and always by quantile.
	groupBy := map[string]bool{tagQuantile: true}
	for _, f := range sq.filters {
		if f.GroupBy && f.Tagk != tagFinal {
			groupBy[f.Tagk] = true
		}
	}
	groups := map[string][]series{}
	var keys []string
	for i, s := range raw {
		k := fmt.Sprintf("%09d", i) // aggregator none: every series on its own, in order
		if agg != nil {
			var b strings.Builder
			for _, gk := range []string{tagEntity, tagQuantile} {
				if groupBy[gk] {
					fmt.Fprintf(&b, "%s=%s\x00", gk, s.tags[gk])
				}
			}
			k = b.String()
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], s)
	}
	sort.Strings(keys)
	var out []tsdbResult
	for _, k := range keys {
		g := groups[k]
		res := tsdbResult{metric: met.name, query: sq}
		res.tags, res.aggTags = commonTags(g)
		if agg == nil {
			res.pts = g[0].pts
		} else {
			res.pts = aggregateSeries(g, agg)
		}
		if sq.rate {
			res.pts = rate(res.pts, sq.rateOptions)
		}
		if !req.ms {
			res.pts = toSeconds(res.pts, agg)
		}
		st.pointsLeft -= len(res.pts)
		if st.pointsLeft < 0 {
			return nil, badRequest("the answer has more than %d data points, the limit: downsample to a longer interval, shorten the range or name fewer entities", a.limits.MaxPoints)
		}
		out = append(out, res)
	}
	return out, nil
}

// read returns the windows of an entity whose start is in [start, end], oldest first, once per
// request.
func (a *tsdbAPI) read(ctx context.Context, st *reqState, met tsdbMetric, entity string, start, end time.Time) ([]Window, error) {
	key := met.topo.Name + "\x00" + met.set + "\x00" + entity
	if ws, ok := st.read[key]; ok {
		return ws, nil
	}
	ws, err := met.topo.Reader.Windows(ctx, met.set, entity, Options{From: start, To: end.Add(time.Millisecond), OldestFirst: true, Limit: st.windowsLeft + 1})
	if err != nil {
		return nil, err
	}
	st.windowsLeft -= len(ws)
	if st.windowsLeft < 0 {
		return nil, badRequest("the request reads more than %d windows, the limit: shorten the range or name fewer entities", a.limits.MaxWindows)
	}
	if len(ws) > 0 {
		a.learnKinds(kindsKey{met.topo.Reader, met.set}, ws[0])
	}
	st.read[key] = ws
	return ws, nil
}
