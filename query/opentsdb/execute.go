package opentsdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/query"
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
	read        map[string][]query.Window // by topology, set and entity: sub-queries share reads
	aggs        map[string][]string       // by topology and set: the aggregates the sub-queries ask of it
}

// setKey names a served set within a request.
func setKey(m tsdbMetric) string { return m.topo.Name + "\x00" + m.set }

// query answers /api/query: each sub-query in turn, sharing the request's reads and its limits.
func (a *API) query(r *http.Request) (any, error) {
	req, err := a.parseQuery(r)
	if err != nil {
		return nil, err
	}
	st := &reqState{windowsLeft: a.Limits.MaxWindows, pointsLeft: a.Limits.MaxPoints, read: map[string][]query.Window{}, aggs: map[string][]string{}}
	// Every aggregate the sub-queries ask of a set is read in one pass over an entity's windows,
	// so that two panels' metrics of one entity cost one read and one share of the window budget.
	for _, sq := range req.queries {
		if m, err := a.metric(sq.metric); err == nil && !slices.Contains(st.aggs[setKey(m)], m.agg) {
			st.aggs[setKey(m)] = append(st.aggs[setKey(m)], m.agg)
		}
	}
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

// run answers one sub-query: the metric's series of the entities its filters select, downsampled,
// grouped and aggregated as it asks, within what the request may still read and answer.
func (a *API) run(ctx context.Context, st *reqState, req *tsdbRequest, sq *subQuery) ([]tsdbResult, error) {
	met, err := a.metric(sq.metric)
	if err != nil {
		return nil, err
	}
	agg, err := sq.aggregatorFunc()
	if err != nil {
		return nil, err
	}
	if err := a.checkTagKeys(met, sq.filters); err != nil {
		return nil, err
	}
	ents, err := a.entities(ctx, met, sq.filters, a.Limits.MaxEntities, true)
	if err != nil {
		return nil, err
	}
	finalFilters, err := sq.finalFilters()
	if err != nil {
		return nil, err
	}
	if err := a.read(ctx, st, met, ents.list, req.start, req.end); err != nil {
		return nil, err
	}
	var raw []series
	for _, e := range ents.list {
		ws := st.read[setKey(met)+"\x00"+e]
		for _, s := range entitySeries(met, e, ws, finalFilters) {
			if matchSeries(sq.filters, s.tags, sq.explicitTags) {
				raw = append(raw, s)
			}
		}
	}
	if err := a.downsampleSeries(st, req, sq, raw); err != nil {
		return nil, err
	}
	var out []tsdbResult
	for _, g := range groupSeries(raw, sq.filters, agg != nil) {
		res := combine(req, sq, met, agg, g)
		st.pointsLeft -= len(res.pts)
		if st.pointsLeft < 0 {
			return nil, badRequest("the answer has more than %d data points, the limit: downsample to a longer interval, shorten the range or name fewer entities", a.Limits.MaxPoints)
		}
		out = append(out, res)
	}
	return out, nil
}

// aggregatorFunc is the sub-query's aggregator; nil for none. A sub-query without one gets sum,
// what Grafana's editor shows for a query saved without one, and echoes it.
func (sq *subQuery) aggregatorFunc() (aggFunc, error) {
	if sq.aggregator == "" {
		sq.aggregator = "sum"
	}
	agg, ok := aggregators[sq.aggregator]
	if !ok {
		return nil, badRequest("queries[%d]: unknown aggregator %q (/api/aggregators lists them)", sq.index, sq.aggregator)
	}
	return agg, nil
}

// finalFilters are the filters on the pseudo key final: they select windows, where the other
// filters select series.
func (sq *subQuery) finalFilters() ([]tagFilter, error) {
	var out []tagFilter
	for _, f := range sq.filters {
		if f.Tagk != tagFinal {
			continue
		}
		if f.Type == "not_key" {
			return nil, badRequest("queries[%d]: final is a pseudo key on every window; not_key cannot apply to it", sq.index)
		}
		out = append(out, f)
	}
	return out, nil
}

// entitySeries is an entity's raw series of the metric's aggregate, from its windows that pass the
// final filters: one series, or one per quantile in quantile order. Values JSON cannot carry (NaN,
// infinities) are left out. The series are tagged with the metric's key (entity, a rollup's
// dimension; nothing for a global rollup).
func entitySeries(met tsdbMetric, entity string, ws []query.Window, finalFilters []tagFilter) []series {
	agg := met.agg
	byTags := map[string]*series{}
	var order []string
	add := func(tags map[string]string, t int64, x float64) {
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
		s.pts = append(s.pts, point{t, x})
	}
	for _, w := range ws {
		final := strconv.FormatBool(w.Final)
		keep := true
		for _, f := range finalFilters {
			keep = keep && f.match(final)
		}
		v, ok := w.Values[agg]
		if !keep || !ok {
			continue
		}
		switch v.Kind {
		case totals.KindQuantiles:
			for _, q := range v.Quantiles {
				tags := met.seriesTags(entity)
				tags[tagQuantile] = formatQuantile(q.Q)
				add(tags, w.Start.UnixMilli(), q.Value)
			}
		case totals.KindInt, totals.KindFloat:
			add(met.seriesTags(entity), w.Start.UnixMilli(), v.Number())
		}
	}
	sort.Strings(order)
	out := make([]series, 0, len(order))
	for _, k := range order {
		out = append(out, *byTags[k])
	}
	return out
}

// downsampleSeries downsamples each series in place. With a fill policy every bucket of the range
// is a point, so the points are counted first: an interval too fine for the range is refused
// before any is made.
func (a *API) downsampleSeries(st *reqState, req *tsdbRequest, sq *subQuery, raw []series) error {
	ds := sq.downsample
	if ds == nil {
		return nil
	}
	if ds.fill != "none" && ds.interval > 0 {
		buckets := (req.end.UnixMilli()-floorTo(req.start.UnixMilli(), ds.interval))/ds.interval + 1
		if buckets*int64(max(len(raw), 1)) > int64(st.pointsLeft) {
			return badRequest("queries[%d]: downsample %s with fill %s over this range makes %d points per series, more than the limit of %d points: use a longer interval or a shorter range",
				sq.index, sq.dsText, ds.fill, buckets, a.Limits.MaxPoints)
		}
	}
	for i := range raw {
		raw[i].pts = downsample(raw[i].pts, ds, req.start.UnixMilli(), req.end.UnixMilli())
	}
	return nil
}

// groupSeries groups series by the group-by keys of the filters, and always by quantile (a sum of
// different quantiles means nothing), in key order. Without aggregation (aggregator none) every
// series is a group of its own, in the order given.
func groupSeries(raw []series, filters []tagFilter, aggregate bool) [][]series {
	groupBy := map[string]bool{tagQuantile: true}
	for _, f := range filters {
		if f.GroupBy && f.Tagk != tagFinal {
			groupBy[f.Tagk] = true
		}
	}
	// The group-by keys in order: the set's key (entity or a rollup's dimension), quantile.
	keys := make([]string, 0, len(groupBy))
	for k := range groupBy {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	groups := map[string][]series{}
	var order []string
	for i, s := range raw {
		k := fmt.Sprintf("%09d", i)
		if aggregate {
			var b strings.Builder
			for _, gk := range keys {
				fmt.Fprintf(&b, "%s=%s\x00", gk, s.tags[gk])
			}
			k = b.String()
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
	}
	sort.Strings(order)
	out := make([][]series, 0, len(order))
	for _, k := range order {
		out = append(out, groups[k])
	}
	return out
}

// combine makes one answered series of a group: its series aggregated (agg nil: the group's one
// series), then the rate, then timestamps in seconds unless the request asked for milliseconds.
func combine(req *tsdbRequest, sq *subQuery, met tsdbMetric, agg aggFunc, g []series) tsdbResult {
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
	return res
}

// read reads the windows of the entities whose start is in [start, end] into st.read, oldest
// first, once per request: several scans at once (query.Reader.Many), within the request's window
// budget. Only the aggregates the request asks of the set are read, and each scan runs forward
// (newest first) and is turned around here: HBase's reversed scan seeks back row by row and took
// six times as long per cell as a forward one in bench/query (one entity's week, 431 ms against
// 70 ms for half the cells forward).
func (a *API) read(ctx context.Context, st *reqState, met tsdbMetric, entities []string, start, end time.Time) error {
	var todo []string
	for _, e := range entities {
		if _, ok := st.read[setKey(met)+"\x00"+e]; !ok && !slices.Contains(todo, e) {
			todo = append(todo, e)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	budget := query.NewBudget(st.windowsLeft)
	res, err := met.topo.Reader.Many(ctx, met.set, todo, query.Options{From: start, To: end.Add(time.Millisecond),
		Aggregates: st.aggs[setKey(met)], Budget: budget})
	if errors.Is(err, query.ErrBudget) {
		return badRequest("the request reads more than %d windows, the limit: shorten the range or name fewer entities", a.Limits.MaxWindows)
	}
	if err != nil {
		return err
	}
	st.windowsLeft = budget.Left()
	for _, e := range todo {
		slices.Reverse(res[e])
		st.read[setKey(met)+"\x00"+e] = res[e]
	}
	return nil
}
