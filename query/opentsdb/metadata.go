package opentsdb

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/query"
)

// The endpoints of the OpenTSDB-compatible API that describe series rather than read their data
// points (/api/version, /api/suggest, /api/search/lookup: what Grafana's editor and template
// variables call), and the metrics and aggregate kinds they are answered from.

// version answers /api/version, which OpenTSDB clients probe; the revision fields name abacus, as
// no OpenTSDB build is behind the answer.
func (a *API) version(*http.Request) (any, error) {
	return map[string]string{
		"version": Version, "short_revision": "abacus", "full_revision": "abacus",
		"repo": "github.com/abacus-stream/abacus", "host": "abacus", "user": "abacus",
		"repo_status": "abacus OpenTSDB-compatible query API", "timestamp": "0",
	}, nil
}

// tsdbMetric is one OpenTSDB metric: an aggregate of a set of a topology.
type tsdbMetric struct {
	name string
	topo *query.Served
	set  string
	agg  string
	// key is the tag key of the set's series: "entity", a rollup's dimension, or "" for a global
	// rollup, whose one series has no tag but quantile.
	key string
}

// global reports whether the metric is a global rollup's: one series, read from query.GlobalKey.
func (m tsdbMetric) global() bool { return m.key == "" }

// seriesTags are the tags of the metric's series of one stored key: {key: value}, or none for a
// global rollup.
func (m tsdbMetric) seriesTags(value string) map[string]string {
	if m.global() {
		return map[string]string{}
	}
	return map[string]string{m.key: value}
}

// what names the metric's kind of set for messages: "is a rollup by region", "is a global rollup".
func (m tsdbMetric) what() string {
	switch {
	case m.global():
		return "is a global rollup: its one series has no tag (but quantile)"
	case m.key == tagEntity:
		return "is an entity set's: its series have the tag key " + tagEntity
	}
	return "is a rollup by " + m.key + ": its series have the tag key " + m.key + " (not " + tagEntity + ")"
}

func (a *API) metrics() []tsdbMetric {
	var out []tsdbMetric
	for i := range a.Topologies {
		t := &a.Topologies[i]
		for _, set := range t.Sets {
			for _, agg := range set.Aggregates {
				out = append(out, tsdbMetric{name: t.Name + "." + set.Name + "." + agg, topo: t, set: set.Name, agg: agg, key: set.KeyName()})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (a *API) metric(name string) (tsdbMetric, error) {
	for _, m := range a.metrics() {
		if m.name == name {
			return m, nil
		}
	}
	return tsdbMetric{}, badRequest("No such name for 'metrics': '%s' (abacus metrics are <topology>.<set>.<aggregate>; /api/suggest?type=metrics lists them)", name)
}

// Tag keys of abacus series; final is a pseudo key that selects data points. The series of a
// rollup have its dimension instead of entity, and a global rollup's have neither.
const (
	tagEntity   = query.EntityDimension
	tagQuantile = "quantile"
	tagFinal    = "final"
)

// tagKeys lists, sorted, every tag key the served series have: the key of each set (entity, the
// rollups' dimensions), quantile, and the pseudo key final.
func (a *API) tagKeys() []string {
	keys := map[string]bool{tagQuantile: true, tagFinal: true}
	for _, t := range a.Topologies {
		for _, set := range t.Sets {
			if k := set.KeyName(); k != "" {
				keys[k] = true
			}
		}
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkTagKeys refuses filters on a tag key the metric's series cannot have, so that a query
// written for another set (entity=... on a rollup by region, any tag on a global rollup) is told
// why it cannot match rather than answered empty. not_key is accepted on any known key: a series
// without the key is what it asks for.
func (a *API) checkTagKeys(met tsdbMetric, filters []tagFilter) error {
	for _, f := range filters {
		if f.Tagk == tagQuantile || f.Tagk == tagFinal || (f.Tagk == met.key && !met.global()) {
			continue
		}
		switch {
		case !slices.Contains(a.tagKeys(), f.Tagk):
			return a.noSuchTagKey(f.Tagk)
		case f.Type == "not_key":
		default:
			return badRequest("metric %s %s; the filter on %s cannot match", met.name, met.what(), f.Tagk)
		}
	}
	return nil
}

// noSuchTagKey is OpenTSDB's answer to a tag key that no series has, listing those that exist.
func (a *API) noSuchTagKey(tagk string) error {
	keys := slices.DeleteFunc(a.tagKeys(), func(k string) bool { return k == tagFinal })
	return badRequest("No such name for 'tagk': '%s' (abacus series have the tag keys %s, and the pseudo key %s)",
		tagk, strings.Join(keys, ", "), tagFinal)
}

// suggest answers /api/suggest: the metrics, tag keys or tag values starting with q, which
// Grafana's query editor offers as completions.
func (a *API) suggest(r *http.Request) (any, error) {
	q, body, err := params(r, a.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	typ, _, err := param(q, body, "type")
	if err != nil {
		return nil, err
	}
	prefix, _, err := param(q, body, "q")
	if err != nil {
		return nil, err
	}
	maxN, err := intParam(q, body, 25, "max")
	if err != nil {
		return nil, err
	}
	if maxN <= 0 || maxN > a.Limits.MaxLookup {
		maxN = a.Limits.MaxLookup
	}
	out := []string{}
	add := func(v string) bool {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
		return len(out) < maxN
	}
	switch typ {
	case "metrics":
		for _, m := range a.metrics() {
			if !add(m.name) {
				break
			}
		}
	case "tagk":
		for _, k := range a.tagKeys() {
			add(k)
		}
	case "tagv":
		vals, err := a.tagValues(r.Context(), prefix, maxN)
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			if !add(v) {
				break
			}
		}
	default:
		return nil, badRequest("parameter type: want metrics, tagk or tagv, got %q", typ)
	}
	return out, nil
}

// tagValues lists, sorted, the tag values a suggestion may offer: true and false (of final), the
// quantiles of every set, and the first entities that start with prefix (a listing stopped at
// MaxEntityScan gives what it found: suggestions may be partial). Entities are listed in order, so
// the first n+1 of each topology are all the first n suggestions can take (one more, for the
// global key that may turn out to be no tag value): an entity picker reads a few key-index rows,
// not a thousand.
func (a *API) tagValues(ctx context.Context, prefix string, n int) ([]string, error) {
	vals := map[string]bool{"true": true, "false": true}
	for i := range a.Topologies {
		t := &a.Topologies[i]
		for _, set := range t.Sets {
			kinds, err := a.setKinds(ctx, t.Reader, set.Name)
			if err != nil {
				return nil, err
			}
			for _, qs := range kinds {
				for _, q := range qs {
					vals[formatQuantile(q)] = true
				}
			}
		}
		// Cut after sorting with the other values, so that the first values come first.
		list, _, err := t.Reader.ListEntities(ctx, "", query.EntityOptions{Limit: n + 1, MaxRows: a.Limits.MaxEntityScan, Prefix: prefix})
		if errors.Is(err, query.ErrEntityScanLimit) {
			err = nil
		}
		if err != nil {
			return nil, err
		}
		for _, e := range list {
			vals[e] = true
		}
		if vals[query.GlobalKey] {
			if keep, err := a.globalKeyIsTagValue(ctx, t); err != nil {
				return nil, err
			} else if !keep {
				delete(vals, query.GlobalKey)
			}
		}
	}
	sorted := make([]string, 0, len(vals))
	for v := range vals {
		sorted = append(sorted, v)
	}
	sort.Strings(sorted)
	return sorted, nil
}

// globalKeyIsTagValue reports whether query.GlobalKey, found among a topology's stored keys, is a
// tag value: the key of an entity set or of a rollup that has windows under it. Under a global
// rollup only, it is no tag value, as a global rollup's series has no tags; one one-window read
// per keyed set tells.
func (a *API) globalKeyIsTagValue(ctx context.Context, t *query.Served) (bool, error) {
	for _, set := range t.Sets {
		if set.Global() {
			continue
		}
		ws, err := t.Reader.Windows(ctx, set.Name, query.GlobalKey, query.Options{Limit: 1, NoLive: true})
		if err != nil || len(ws) > 0 {
			return err == nil, err
		}
	}
	return false, nil
}

// lookupResult is one series of a lookup answer. TSUID stays empty: abacus has no UIDs, but
// clients expect the field.
type lookupResult struct {
	Metric string            `json:"metric"`
	Tags   map[string]string `json:"tags"`
	TSUID  string            `json:"tsuid"`
}

// lookupPair is a tag of the m parameter as the answer echoes it.
type lookupPair struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// lookupQuery is the m parameter of a lookup: a metric name ("" or * for every metric) and its
// tags, both as given (for the echo) and as filters.
type lookupQuery struct {
	metric  string
	pairs   []lookupPair
	filters []tagFilter
}

// lookup lists the series of a metric that match tag values: m=<metric>{<tagk>=<value>,...}, where
// a value is exact, * (any) or a glob. Grafana reads tag keys (m=<metric>) and tag values
// (m=<metric>{entity=*}, or m=<metric>{region=*} for a rollup by region) for its template
// variables from it. A metric named outright refuses a tag key its series cannot have, as
// /api/query does; with every metric (* or none), the metrics without the key are left out.
func (a *API) lookup(r *http.Request) (any, error) {
	t0 := time.Now()
	q, body, err := params(r, a.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	m, ok, err := param(q, body, "m", "metric")
	if err != nil {
		return nil, err
	}
	if !ok || m == "" {
		return nil, badRequest("parameter m: required, as <metric>{<tagk>=<value>,...}")
	}
	limit, err := intParam(q, body, 0, "limit")
	if err != nil {
		return nil, err
	}
	if limit <= 0 || limit > a.Limits.MaxLookup {
		limit = a.Limits.MaxLookup
	}
	lq, err := parseLookupM(m)
	if err != nil {
		return nil, err
	}
	metrics, err := a.lookupMetrics(lq.metric)
	if err != nil {
		return nil, err
	}
	results, total, err := a.lookupSeries(r.Context(), metrics, lq.filters, limit)
	if err != nil {
		return nil, err
	}
	return map[string]any{"type": "LOOKUP", "metric": lq.metric, "tags": lq.pairs, "limit": limit,
		"time": time.Since(t0).Milliseconds(), "results": results, "startIndex": 0, "totalResults": total}, nil
}

// parseLookupM reads <metric>{<tagk>=<value>,...}. A value with a * is a wildcard, any other one
// exact: lookup takes no filter functions, unlike /api/query.
func parseLookupM(m string) (lookupQuery, error) {
	lq := lookupQuery{metric: m, pairs: []lookupPair{}}
	tags := ""
	if i := strings.IndexByte(m, '{'); i >= 0 {
		if !strings.HasSuffix(m, "}") {
			return lq, badRequest("parameter m: %q has no closing }", m)
		}
		lq.metric, tags = m[:i], m[i+1:len(m)-1]
	}
	for _, kv := range splitTop(tags, ',') {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return lq, badRequest("parameter m: tag %q is not <tagk>=<value>", kv)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		lq.pairs = append(lq.pairs, lookupPair{k, v})
		typ := "literal_or"
		if strings.Contains(v, "*") {
			typ = "wildcard"
		}
		f, err := newTagFilter(typ, k, v, true)
		if err != nil {
			return lq, err
		}
		lq.filters = append(lq.filters, f)
	}
	return lq, nil
}

// lookupMetrics is the metric a lookup names, or every metric for "" and *.
func (a *API) lookupMetrics(name string) ([]tsdbMetric, error) {
	if name == "" || name == "*" {
		return a.metrics(), nil
	}
	met, err := a.metric(name)
	if err != nil {
		return nil, err
	}
	return []tsdbMetric{met}, nil
}

// lookupSeries lists up to limit series of metrics that pass filters, in metric order, and counts
// the matching series it saw; a metric with more entities than limit counts one more, so that the
// total says there are more than the results even where the rest was not read.
func (a *API) lookupSeries(ctx context.Context, metrics []tsdbMetric, filters []tagFilter, limit int) ([]lookupResult, int, error) {
	results := []lookupResult{}
	total := 0
	for _, f := range filters {
		if !slices.Contains(a.tagKeys(), f.Tagk) {
			return nil, 0, a.noSuchTagKey(f.Tagk)
		}
	}
	for _, met := range metrics {
		if err := a.checkTagKeys(met, filters); err != nil {
			if len(metrics) == 1 {
				return nil, 0, err
			}
			continue // the metric has no series with the filters' keys
		}
		ents, err := a.entities(ctx, met, filters, limit, false)
		if err != nil {
			return nil, 0, err
		}
		series, err := a.seriesTags(ctx, met, ents.list)
		if err != nil {
			return nil, 0, err
		}
		for _, tags := range series {
			if !matchSeries(filters, tags, false) {
				continue
			}
			total++
			if len(results) < limit {
				results = append(results, lookupResult{Metric: met.name, Tags: tags})
			}
		}
		if ents.more {
			total++ // at least one more exists
		}
		if len(results) >= limit {
			break
		}
	}
	return results, total, nil
}

// seriesTags lists the tags of a metric's series for the given entities (a rollup's keys): one
// per entity, or one per entity and quantile for a quantile aggregate.
func (a *API) seriesTags(ctx context.Context, met tsdbMetric, entities []string) ([]map[string]string, error) {
	kinds, err := a.setKinds(ctx, met.topo.Reader, met.set)
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, e := range entities {
		qs := kinds[met.agg]
		if len(qs) == 0 {
			out = append(out, met.seriesTags(e))
			continue
		}
		for _, q := range qs {
			tags := met.seriesTags(e)
			tags[tagQuantile] = formatQuantile(q)
			out = append(out, tags)
		}
	}
	return out, nil
}

// setKinds returns, for the aggregates of a set that hold quantiles, their quantiles, read once
// from the newest window of the first entity found and then cached.
func (a *API) setKinds(ctx context.Context, r *query.Reader, set string) (map[string][]float64, error) {
	key := kindsKey{r, set}
	if v, ok := a.kinds.Load(key); ok {
		return v.(map[string][]float64), nil
	}
	if at, ok := a.kindsMissed.Load(key); ok && time.Since(at.(time.Time)) < kindsRecheck {
		return nil, nil
	}
	ents, _, err := r.ListEntities(ctx, set, query.EntityOptions{Limit: 1, MaxRows: a.Limits.MaxEntityScan})
	if err != nil {
		return nil, err
	}
	var ws []query.Window
	if len(ents) > 0 {
		if ws, err = r.Windows(ctx, set, ents[0], query.Options{Limit: 1, NoLive: true}); err != nil {
			return nil, err
		}
	}
	if len(ws) == 0 {
		a.kindsMissed.Store(key, time.Now()) // nothing stored yet: learn later
		return nil, nil
	}
	kinds := a.learnKinds(key, ws[0])
	return kinds, nil
}

// learnKinds records the quantile aggregates of a window's set.
func (a *API) learnKinds(key kindsKey, w query.Window) map[string][]float64 {
	if v, ok := a.kinds.Load(key); ok {
		return v.(map[string][]float64)
	}
	kinds := map[string][]float64{}
	for name, v := range w.Values {
		if len(v.Quantiles) > 0 {
			qs := make([]float64, len(v.Quantiles))
			for i, q := range v.Quantiles {
				qs[i] = q.Q
			}
			kinds[name] = qs
		}
	}
	a.kinds.Store(key, kinds)
	return kinds
}

func formatQuantile(q float64) string { return strconv.FormatFloat(q, 'f', -1, 64) }
