package opentsdb

import (
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"sort"
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

// reqState is what one request may still read and answer.
type reqState struct {
	budget     *query.Budget // windows the request may still read, over all its sub-queries
	pointsLeft int
}

// setKey names a served set within a request.
func setKey(m tsdbMetric) string { return m.topo.Name + "\x00" + m.set }

// prepared is a sub-query ready to read: its metric, aggregator, entities and window filters.
type prepared struct {
	sq           *subQuery
	met          tsdbMetric
	agg          aggFunc
	entities     []string // in order: the order its series meet in
	finalFilters []tagFilter
	fold         *folder
	// coarse, when set, is a coarser form of the metric's set that answers the sub-query's
	// buckets as the set would (coarserFor).
	coarse *query.Coarse
}

// readKey names what a prepared sub-query reads: its set, and the coarser form it reads through.
func (p *prepared) readKey() string {
	k := setKey(p.met)
	if p.coarse != nil {
		k += "\x00" + p.coarse.Set
	}
	return k
}

// chunkWindows bounds the windows one chunk of entities holds before it is folded and let go (a
// chunk is sized to it from the windows one entity can have in the range): a wildcard over any
// number of entities holds that many at most, 64 entities' week of minute windows of one aggregate
// (about 26 MB as query.Columns).
const chunkWindows = 64 * 7 * 24 * 60

// minChunk and maxChunk bound a chunk's entities. Several entities of each salt bucket read in one
// scan (query.Reader.ManyColumns) is what makes a fleet cheap: a chunk of 64 entities over a table
// of 16 buckets reads 16 scans of 4 entities each, and a chunk never gets fewer (a long range of
// fine windows would make it one entity). Past maxChunk a scan's row ranges outgrow what a scan
// request should carry.
const minChunk, maxChunk = 64, 4096

// chunkSize is how many entities a chunk of readSet holds: as many as keep it within chunkWindows
// when every entity has every window of the range (of set's window size, or of the coarser form,
// whose edges and open end come from the finer set), between minChunk and maxChunk. A set of
// windows of no fixed size (hopping, sessions) gets minChunk.
func chunkSize(size time.Duration, coarse *query.Coarse, span time.Duration, aggs int) int {
	if size <= 0 {
		return minChunk
	}
	per := int64(span/size) + 1
	if coarse != nil && coarse.Size > 0 {
		per = int64(span/coarse.Size) + 1 + 2*int64(coarse.Size/size)
	}
	per *= int64(max(aggs, 1))
	return int(min(max(chunkWindows/per, minChunk), maxChunk))
}

// query answers /api/query. Every sub-query is prepared first (metric, aggregator, entities);
// then each set the sub-queries ask is read once, a chunk of entities at a time, every aggregate
// any of them asks of it in one pass, and each chunk is folded into the sub-queries that take its
// entities before the next is read; then each sub-query's groups make its answer, in order.
func (a *API) query(r *http.Request) (any, error) {
	req, err := a.parseQuery(r)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	st := &reqState{budget: query.NewBudget(a.Limits.MaxWindows), pointsLeft: a.Limits.MaxPoints}
	subs := make([]*prepared, len(req.queries))
	var sets []string                 // in the order the sub-queries first ask them
	bySet := map[string][]*prepared{} // the sub-queries of each set
	aggs := map[string][]string{}     // the aggregates the sub-queries ask of each set
	for i := range req.queries {
		p, err := a.prepare(ctx, req, &req.queries[i])
		if err != nil {
			return nil, err
		}
		subs[i] = p
		k := p.readKey()
		if _, ok := bySet[k]; !ok {
			sets = append(sets, k)
		}
		bySet[k] = append(bySet[k], p)
		if !slices.Contains(aggs[k], p.met.agg) {
			aggs[k] = append(aggs[k], p.met.agg)
		}
	}
	for _, k := range sets {
		if err := a.readSet(ctx, st, req, bySet[k], aggs[k]); err != nil {
			return nil, err
		}
	}
	var results []tsdbResult
	for _, p := range subs {
		for _, g := range p.fold.results() {
			res := combine(req, p.sq, p.met, p.agg, g)
			st.pointsLeft -= len(res.pts)
			if st.pointsLeft < 0 {
				return nil, badRequest("the answer has more than %d data points, the limit: downsample to a longer interval, shorten the range or name fewer entities", a.Limits.MaxPoints)
			}
			results = append(results, res)
		}
	}
	return rawJSON(encodeResults(req, results)), nil
}

// prepare resolves a sub-query: its metric, its aggregator, the entities its filters select and
// its filters on final, and checks that one series of it fits the answer's points.
func (a *API) prepare(ctx context.Context, req *tsdbRequest, sq *subQuery) (*prepared, error) {
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
	// With a fill policy every bucket of the range is a point of every series: an interval too
	// fine for the range is refused before anything is read.
	if ds := sq.downsample; ds != nil && ds.fill != "none" && ds.interval > 0 {
		buckets := (req.end.UnixMilli()-floorTo(req.start.UnixMilli(), ds.interval))/ds.interval + 1
		if buckets > int64(a.Limits.MaxPoints) {
			return nil, badRequest("queries[%d]: downsample %s with fill %s over this range makes %d points per series, more than the limit of %d points: use a longer interval or a shorter range",
				sq.index, sq.dsText, ds.fill, buckets, a.Limits.MaxPoints)
		}
	}
	list := slices.Clone(ents.list)
	sort.Strings(list)
	p := &prepared{sq: sq, met: met, agg: agg, entities: list, finalFilters: finalFilters, fold: newFolder(sq, agg, a.Limits.MaxPoints)}
	if !a.NoCoarser {
		p.coarse = coarserFor(met, sq, len(finalFilters) > 0)
	}
	return p, nil
}

// mergesBy lists, by aggregation kind, the downsampling aggregators that give over a coarser
// window's value what they give over the finer windows inside it: a sum of counts or sums is
// their sum, a min of mins their min, a max of maxes their max, the last of lasts the last one
// (a last aggregation keeps the event with the latest time, and windows come in time order).
// Others (avg, count, dev, percentiles; means, sketches' estimates) depend on the points
// themselves.
var mergesBy = map[string][]string{
	"count": {"sum", "zimsum"},
	"sum":   {"sum", "zimsum"},
	"min":   {"min", "mimmin"},
	"max":   {"max", "mimmax"},
	"last":  {"last"},
}

// coarserFor is the coarsest coarser form of the metric's set (topology AggregateSet.Coarser, to
// any depth) that keeps the metric's aggregate, whose window divides the sub-query's downsampling
// interval and whose windows merge by its downsampling aggregator; nil when none does, or when
// the sub-query filters on final (a window's finality is its own).
func coarserFor(met tsdbMetric, sq *subQuery, onFinal bool) *query.Coarse {
	ds := sq.downsample
	if ds == nil || onFinal {
		return nil
	}
	byName := map[string]query.ServedSet{}
	for _, s := range met.topo.Sets {
		byName[s.Name] = s
	}
	fine, ok := byName[met.set]
	if !ok || !slices.Contains(mergesBy[fine.Kind(met.agg)], ds.agg) {
		return nil
	}
	var best *query.ServedSet
	for _, s := range met.topo.Sets {
		if s.Size <= 0 || (ds.interval > 0 && ds.interval%s.Size.Milliseconds() != 0) || (best != nil && s.Size <= best.Size) ||
			!slices.Contains(s.Aggregates, met.agg) {
			continue
		}
		for c, depth := s, 0; c.Coarsens != "" && depth < len(met.topo.Sets); depth++ {
			if c.Coarsens == met.set {
				best = &s
				break
			}
			c = byName[c.Coarsens]
		}
	}
	if best == nil {
		return nil
	}
	return &query.Coarse{Set: best.Name, Size: best.Size, Aggregates: best.Aggregates}
}

// readSet reads the windows of one set's entities that the sub-queries ps ask, whose start is in
// the request's range, a chunk at a time (query.Reader.ManyColumns: several scans at once, within
// the request's window budget), and folds each entity's series into every sub-query that takes
// it. Only the aggregates asked are read, as columns: no map per window.
func (a *API) readSet(ctx context.Context, st *reqState, req *tsdbRequest, ps []*prepared, aggs []string) error {
	var all []string
	takes := make([]map[string]bool, len(ps))
	for i, p := range ps {
		takes[i] = make(map[string]bool, len(p.entities))
		for _, e := range p.entities {
			takes[i][e] = true
		}
		all = append(all, p.entities...)
	}
	sort.Strings(all)
	all = slices.Compact(all)
	met := ps[0].met
	var size time.Duration
	if i := slices.IndexFunc(met.topo.Sets, func(s query.ServedSet) bool { return s.Name == met.set }); i >= 0 {
		size = met.topo.Sets[i].Size
	}
	n := chunkSize(size, ps[0].coarse, req.end.Sub(req.start), len(aggs))
	for len(all) > 0 {
		chunk := all[:min(n, len(all))]
		all = all[len(chunk):]
		o := query.Options{From: req.start, To: req.end.Add(time.Millisecond), Aggregates: aggs, Budget: st.budget}
		res, err := met.topo.Reader.ManyColumns(ctx, met.set, ps[0].coarse, chunk, o)
		if errors.Is(err, query.ErrBudget) {
			return badRequest("the request reads more than %d windows, the limit: shorten the range or name fewer entities", a.Limits.MaxWindows)
		}
		if err != nil {
			return err
		}
		for ci, e := range chunk {
			ws := res[ci]
			for i, p := range ps {
				if !takes[i][e] {
					continue
				}
				for _, s := range entitySeries(p.met, e, ws, p.finalFilters) {
					if !matchSeries(p.sq.filters, s.tags, p.sq.explicitTags) {
						continue
					}
					if ds := p.sq.downsample; ds != nil {
						s.pts = downsample(s.pts, ds, req.start.UnixMilli(), req.end.UnixMilli())
					}
					if err := p.fold.add(s); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
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
func entitySeries(met tsdbMetric, entity string, ws *query.Columns, finalFilters []tagFilter) []series {
	col := ws.Column(met.agg)
	if col < 0 {
		return nil
	}
	// The final filters select by a window's finality: decided once for each of the two.
	var keep [2]bool
	for i, final := range []string{"false", "true"} {
		keep[i] = true
		for _, f := range finalFilters {
			keep[i] = keep[i] && f.match(final)
		}
	}
	// A series per quantile tag ("" for numbers); its tags are made with the series, not per
	// window (a week of minute windows made 10,080 maps for one series).
	type keyed struct {
		k string
		s *series
	}
	var all []keyed
	var plain *series
	byQ := map[float64]*series{}
	newSeries := func(k string) *series {
		tags := met.seriesTags(entity)
		if k != "" {
			tags[tagQuantile] = k
		}
		s := &series{tags: tags, pts: make([]point, 0, ws.Len())}
		all = append(all, keyed{k, s})
		return s
	}
	ok := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	for i := range ws.Len() {
		if !keep[b2i(ws.Final(i))] {
			continue
		}
		t := ws.StartMilli(i)
		if x, isNum := ws.Number(col, i); isNum {
			if ok(x) {
				if plain == nil {
					plain = newSeries("")
				}
				plain.pts = append(plain.pts, point{t, x})
			}
			continue
		}
		v, has := ws.Value(col, i)
		if !has || v.Kind != totals.KindQuantiles {
			continue
		}
		for _, q := range v.Quantiles {
			if !ok(q.Value) {
				continue
			}
			s := byQ[q.Q]
			if s == nil {
				s = newSeries(formatQuantile(q.Q))
				byQ[q.Q] = s
			}
			s.pts = append(s.pts, point{t, q.Value})
		}
	}
	slices.SortFunc(all, func(a, b keyed) int { return strings.Compare(a.k, b.k) })
	out := make([]series, 0, len(all))
	for _, k := range all {
		out = append(out, *k.s)
	}
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// combine makes one answered series of a folded group: its points (agg nil: the group's one
// series), then the rate, then timestamps in seconds unless the request asked for milliseconds.
func combine(req *tsdbRequest, sq *subQuery, met tsdbMetric, agg aggFunc, g foldedGroup) tsdbResult {
	res := tsdbResult{metric: met.name, query: sq, pts: g.pts}
	res.tags, res.aggTags = commonTags(g.tags)
	if sq.rate {
		res.pts = rate(res.pts, sq.rateOptions)
	}
	if !req.ms {
		res.pts = toSeconds(res.pts, agg)
	}
	return res
}
