package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
)

// ---- the request ----

// tsdbRequest is one /api/query request, from a JSON body or a query string.
type tsdbRequest struct {
	start, end time.Time
	ms         bool // timestamps in milliseconds (msResolution)
	arrays     bool // data points as [[t, v], ...] (OpenTSDB 2.4, Grafana's version 2.4 mode)
	showQuery  bool // echo each sub-query with its index (Grafana's version 2.3 mode maps results by it)
	queries    []subQuery
}

type subQuery struct {
	index        int
	metric       string
	aggregator   string
	downsample   *downsampleSpec
	dsText       string
	rate         bool
	rateOptions  rateOptions
	filters      []tagFilter
	tags         map[string]string // as given, for the echo
	explicitTags bool
}

type rateOptions struct {
	Counter    bool     `json:"counter"`
	CounterMax *float64 `json:"counterMax,omitempty"`
	ResetValue *float64 `json:"resetValue,omitempty"`
	DropResets bool     `json:"dropResets"`
}

// subQueryJSON is a sub-query as Grafana and other clients send it. Fields abacus does not know
// (Grafana sends its whole query model: refId, alias, hide, ...) are ignored.
type subQueryJSON struct {
	Metric       string         `json:"metric"`
	Aggregator   string         `json:"aggregator"`
	Downsample   string         `json:"downsample"`
	Rate         bool           `json:"rate"`
	RateOptions  *rateOptions   `json:"rateOptions"`
	Tags         map[string]any `json:"tags"`
	Filters      []tagFilter    `json:"filters"`
	ExplicitTags bool           `json:"explicitTags"`
	TSUIDs       []string       `json:"tsuids"`
}

func (a *tsdbAPI) parseQuery(r *http.Request) (*tsdbRequest, error) {
	q, body, err := params(r, a.s.Limits.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	req := &tsdbRequest{}
	if req.ms, err = boolParam(q, body, "msResolution", "ms"); err != nil {
		return nil, err
	}
	if req.arrays, err = boolParam(q, body, "arrays"); err != nil {
		return nil, err
	}
	if req.showQuery, err = boolParam(q, body, "showQuery", "show_query"); err != nil {
		return nil, err
	}
	for _, refused := range []string{"delete", "useCalendar", "use_calendar"} {
		if on, err := boolParam(q, body, refused); err != nil || on {
			if err == nil {
				err = badRequest("parameter %s: abacus does not support it (it only reads, and downsamples on UTC boundaries)", refused)
			}
			return nil, err
		}
	}
	loc := time.UTC
	if tz, ok, err := param(q, body, "timezone", "tz"); err != nil {
		return nil, err
	} else if ok && tz != "" {
		if loc, err = time.LoadLocation(tz); err != nil {
			return nil, badRequest("parameter timezone: %v", err)
		}
	}
	now := a.s.Now()
	start, ok, err := param(q, body, "start")
	if err != nil {
		return nil, err
	}
	if !ok || start == "" {
		return nil, badRequest("parameter start: required (e.g. 1h-ago, seconds or milliseconds since the epoch, 2026/11/30-12:00:00)")
	}
	if req.start, err = tsdbTime(start, now, loc); err != nil {
		return nil, badRequest("parameter start: %v", err)
	}
	req.end = now
	if end, ok, err := param(q, body, "end"); err != nil {
		return nil, err
	} else if ok && end != "" {
		if req.end, err = tsdbTime(end, now, loc); err != nil {
			return nil, badRequest("parameter end: %v", err)
		}
	}
	if !req.end.After(req.start) {
		return nil, badRequest("end %s is not after start %s", req.end.UTC().Format(time.RFC3339), req.start.UTC().Format(time.RFC3339))
	}
	if span := req.end.Sub(req.start); span > a.limits.MaxRange {
		return nil, badRequest("the range from start to end is %s, longer than the limit of %s: ask for a shorter range", span.Round(time.Second), a.limits.MaxRange)
	}
	// Sub-queries: a JSON array in the body, or m= parameters in the query string.
	if raw, ok := body["queries"]; ok {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, badRequest("parameter queries: want an array of sub-queries: %v", err)
		}
		for i, item := range list {
			var sq subQueryJSON
			if err := json.Unmarshal(item, &sq); err != nil {
				return nil, badRequest("queries[%d]: %v", i, err)
			}
			s, err := sq.compile(i)
			if err != nil {
				return nil, err
			}
			req.queries = append(req.queries, s)
		}
	}
	for _, m := range q["m"] {
		s, err := parseM(m, len(req.queries))
		if err != nil {
			return nil, err
		}
		req.queries = append(req.queries, s)
	}
	if len(q["tsuid"])+len(q["tsuids"]) > 0 {
		return nil, badRequest("tsuid queries are not supported: abacus has no UIDs; query by metric")
	}
	if len(req.queries) == 0 {
		return nil, badRequest("no sub-query: give queries (JSON body) or m= (query string)")
	}
	if len(req.queries) > a.limits.MaxSubQueries {
		return nil, badRequest("%d sub-queries, more than the limit of %d", len(req.queries), a.limits.MaxSubQueries)
	}
	return req, nil
}

func (sq subQueryJSON) compile(index int) (subQuery, error) {
	if len(sq.TSUIDs) > 0 {
		return subQuery{}, badRequest("queries[%d]: tsuid queries are not supported: abacus has no UIDs; query by metric", index)
	}
	s := subQuery{index: index, metric: strings.TrimSpace(sq.Metric), aggregator: sq.Aggregator, rate: sq.Rate,
		explicitTags: sq.ExplicitTags, tags: map[string]string{}}
	if s.metric == "" {
		return s, badRequest("queries[%d]: metric is required", index)
	}
	if sq.RateOptions != nil {
		s.rateOptions = *sq.RateOptions
	}
	if err := s.setDownsample(sq.Downsample); err != nil {
		return s, err
	}
	// Tags are group-by filters, as OpenTSDB 2.2 and later read them.
	keys := make([]string, 0, len(sq.Tags))
	for k := range sq.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := sq.Tags[k].(string)
		if !ok {
			return s, badRequest("queries[%d]: tag %s: want a string value, got %v", index, k, sq.Tags[k])
		}
		s.tags[k] = v
		f, err := tagValueFilter(k, v, true)
		if err != nil {
			return s, err
		}
		s.filters = append(s.filters, f)
	}
	for _, f := range sq.Filters {
		c, err := newTagFilter(f.Type, f.Tagk, f.Filter, f.GroupBy)
		if err != nil {
			return s, err
		}
		s.filters = append(s.filters, c)
	}
	return s, nil
}

// tagValueFilter reads a tag value of the tags map or of m= braces: * (any), a|b (any of),
// type(expression), or an exact value.
func tagValueFilter(k, v string, groupBy bool) (tagFilter, error) {
	if i := strings.IndexByte(v, '('); i > 0 && strings.HasSuffix(v, ")") && isFilterType(v[:i]) {
		return newTagFilter(v[:i], k, v[i+1:len(v)-1], groupBy)
	}
	if v == "*" {
		return newTagFilter("wildcard", k, "*", groupBy)
	}
	return newTagFilter("literal_or", k, v, groupBy)
}

func isFilterType(s string) bool { _, ok := filterDocs[s]; return ok }

func (s *subQuery) setDownsample(text string) error {
	if text == "" {
		return nil
	}
	ds, err := parseDownsample(text)
	if err != nil {
		return badRequest("queries[%d]: downsample %q: %v", s.index, text, err)
	}
	s.downsample, s.dsText = ds, text
	return nil
}

// parseM reads a query-string sub-query:
// <aggregator>:[<downsample>:][rate[{counter[,max[,reset]]}]:][explicit_tags:]<metric>[{group-by tags}][{other tags}]
func parseM(m string, index int) (subQuery, error) {
	s := subQuery{index: index, tags: map[string]string{}}
	bad := func(format string, args ...any) error {
		return badRequest("parameter m=%s: %s", m, fmt.Sprintf(format, args...))
	}
	rest := m
	agg, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return s, bad("want <aggregator>:<metric>")
	}
	s.aggregator = agg
	for {
		switch {
		case strings.HasPrefix(rest, "rate{") || strings.HasPrefix(rest, "rate:"):
			s.rate = true
			rest = rest[len("rate"):]
			if strings.HasPrefix(rest, "{") {
				end := strings.IndexByte(rest, '}')
				if end < 0 {
					return s, bad("rate options have no closing }")
				}
				opts := strings.Split(rest[1:end], ",")
				s.rateOptions.Counter = opts[0] == "counter"
				for i, o := range opts[1:] {
					if o == "" {
						continue
					}
					v, err := strconv.ParseFloat(o, 64)
					if err != nil {
						return s, bad("rate option %q is not a number", o)
					}
					if i == 0 {
						s.rateOptions.CounterMax = &v
					} else {
						s.rateOptions.ResetValue = &v
					}
				}
				rest = rest[end+1:]
			}
			rest = strings.TrimPrefix(rest, ":")
			continue
		case strings.HasPrefix(rest, "explicit_tags:"):
			s.explicitTags = true
			rest = rest[len("explicit_tags:"):]
			continue
		}
		end := strings.IndexAny(rest, ":{")
		if end >= 0 && rest[end] == ':' {
			if err := s.setDownsample(rest[:end]); err != nil {
				return s, err
			}
			rest = rest[end+1:]
			continue
		}
		break
	}
	name := rest
	braces := ""
	if i := strings.IndexByte(rest, '{'); i >= 0 {
		name, braces = rest[:i], rest[i:]
	}
	if name == "" {
		return s, bad("no metric")
	}
	s.metric = name
	for group := 0; braces != ""; group++ {
		if group > 1 || braces[0] != '{' {
			return s, bad("want at most two {...} tag groups after the metric")
		}
		end := strings.IndexByte(braces, '}')
		for end >= 0 && strings.Count(braces[:end], "(") > strings.Count(braces[:end], ")") {
			next := strings.IndexByte(braces[end+1:], '}')
			if next < 0 {
				end = -1
				break
			}
			end += next + 1
		}
		if end < 0 {
			return s, bad("a { has no closing }")
		}
		for _, kv := range splitTop(braces[1:end], ',') {
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return s, bad("tag %q is not <tagk>=<value>", kv)
			}
			f, err := tagValueFilter(k, v, group == 0)
			if err != nil {
				return s, err
			}
			s.filters = append(s.filters, f)
			if group == 0 {
				s.tags[k] = v
			}
		}
		braces = braces[end+1:]
	}
	return s, nil
}

var (
	relTime = regexp.MustCompile(`^(\d+)(ms|s|m|h|d|w|n|y)-ago$`)
	unixTS  = regexp.MustCompile(`^(\d+)(?:\.(\d{1,3}))?$`)
)

// tsdbTime reads a time as OpenTSDB does: relative (1h-ago; units ms s m h d w n y, with n = 30
// days and y = 365 days), Unix seconds (up to 10 digits) or milliseconds (more), seconds with a
// fraction (1364410924.250), yyyy/MM/dd[-HH:mm[:ss]] (or with a space) in loc, "now", and also
// RFC 3339.
func tsdbTime(v string, now time.Time, loc *time.Location) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "now" {
		return now, nil
	}
	if m := relTime.FindStringSubmatch(v); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return time.Time{}, err
		}
		d, _ := unitDuration(m[2])
		if n > int64(math.MaxInt64/d) {
			return time.Time{}, fmt.Errorf("%q is too far in the past", v)
		}
		return now.Add(-time.Duration(n) * d), nil
	}
	if m := unixTS.FindStringSubmatch(v); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: %v", v, err)
		}
		if m[2] != "" {
			frac, _ := strconv.Atoi((m[2] + "00")[:3])
			return time.UnixMilli(n*1000 + int64(frac)), nil
		}
		if len(m[1]) <= 10 {
			return time.Unix(n, 0), nil
		}
		return time.UnixMilli(n), nil
	}
	for _, layout := range []string{"2006/01/02-15:04:05", "2006/01/02 15:04:05", "2006/01/02-15:04", "2006/01/02 15:04", "2006/01/02"} {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t, nil
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a relative time (1h-ago), Unix seconds or milliseconds, or yyyy/MM/dd-HH:mm:ss", v)
}

func unitDuration(u string) (time.Duration, bool) {
	switch u {
	case "ms":
		return time.Millisecond, true
	case "s":
		return time.Second, true
	case "m":
		return time.Minute, true
	case "h":
		return time.Hour, true
	case "d":
		return 24 * time.Hour, true
	case "w":
		return 7 * 24 * time.Hour, true
	case "n":
		return 30 * 24 * time.Hour, true
	case "y":
		return 365 * 24 * time.Hour, true
	}
	return 0, false
}

// ---- downsampling and aggregation ----

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

// ---- running a query ----

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
	var out []point
	emptyValue, fill := 0.0, ds.fill != "none"
	if ds.fill == "nan" || ds.fill == "null" {
		emptyValue = math.NaN() // written as null: JSON has no NaN
	}
	next := floorTo(start, ds.interval) // next bucket a fill policy must cover
	var vals []float64
	for i := 0; i < len(pts); {
		b := floorTo(pts[i].t, ds.interval)
		for fill && next < b {
			out = append(out, point{next, emptyValue})
			next += ds.interval
		}
		vals = vals[:0]
		for ; i < len(pts) && floorTo(pts[i].t, ds.interval) == b; i++ {
			vals = append(vals, pts[i].v)
		}
		out = append(out, point{b, fn(vals)})
		next = b + ds.interval
	}
	for fill && next <= end {
		out = append(out, point{next, emptyValue})
		next += ds.interval
	}
	return out
}

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

// encodeResults writes the answer: an array of {metric, tags, aggregateTags, [query], dps}, with
// dps an object of timestamp to value (or [[t, v], ...] with arrays) in time order.
func encodeResults(req *tsdbRequest, results []tsdbResult) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, res := range results {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"metric":`)
		writeJSONValue(&b, res.metric)
		b.WriteString(`,"tags":`)
		writeJSONValue(&b, res.tags)
		b.WriteString(`,"aggregateTags":`)
		writeJSONValue(&b, res.aggTags)
		if req.showQuery {
			b.WriteString(`,"query":`)
			writeJSONValue(&b, res.query.echo())
		}
		b.WriteString(`,"dps":`)
		if req.arrays {
			b.WriteByte('[')
		} else {
			b.WriteByte('{')
		}
		for j, p := range res.pts {
			if j > 0 {
				b.WriteByte(',')
			}
			ts := p.t
			if !req.ms {
				ts /= 1000
			}
			if req.arrays {
				fmt.Fprintf(&b, "[%d,", ts)
			} else {
				fmt.Fprintf(&b, `"%d":`, ts)
			}
			writeNumber(&b, p.v)
			if req.arrays {
				b.WriteByte(']')
			}
		}
		if req.arrays {
			b.WriteByte(']')
		} else {
			b.WriteByte('}')
		}
		b.WriteByte('}')
	}
	b.WriteString("]\n")
	return b.Bytes()
}

func writeJSONValue(b *bytes.Buffer, v any) {
	out, err := json.Marshal(v)
	if err != nil { // maps of strings and slices of strings always marshal
		out = []byte("null")
	}
	b.Write(out)
}

// writeNumber writes a value as encoding/json would, and NaN or infinities (empty buckets of the
// nan and null fill policies) as null.
func writeNumber(b *bytes.Buffer, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		b.WriteString("null")
		return
	}
	f := byte('f')
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		f = 'e'
	}
	b.Write(strconv.AppendFloat(nil, v, f, -1, 64))
}

// echo is the sub-query as the answer repeats it with showQuery.
func (sq *subQuery) echo() map[string]any {
	filters := sq.filters
	if filters == nil {
		filters = []tagFilter{}
	}
	return map[string]any{"index": sq.index, "metric": sq.metric, "aggregator": sq.aggregator,
		"downsample": nullable(sq.dsText), "rate": sq.rate, "rateOptions": sq.rateOptions,
		"tags": sq.tags, "filters": filters, "explicitTags": sq.explicitTags}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ---- entities ----

type entitySet struct {
	list []string
	more bool // more entities matched than the limit
}

// entities resolves the entities of a metric that pass the entity filters: entities a
// case-sensitive literal_or names are taken as named, with no read; otherwise entities are listed
// by skipping from one to the next in the table (listEntities). With strict, more than limit
// entities, or a listing stopped by MaxEntityScan, is an error rather than a partial answer.
func (a *tsdbAPI) entities(ctx context.Context, met tsdbMetric, filters []tagFilter, limit int, strict bool) (entitySet, error) {
	var ef []tagFilter
	var named []string
	hasNamed := false
	for _, f := range filters {
		if f.Tagk != tagEntity {
			continue
		}
		if f.Type == "not_key" {
			return entitySet{}, nil // every abacus series has an entity
		}
		ef = append(ef, f)
		if f.literals != nil {
			if !hasNamed {
				named, hasNamed = append([]string(nil), f.literals...), true
			} else {
				named = intersect(named, f.literals)
			}
		}
	}
	match := func(e string) bool {
		for _, f := range ef {
			if !f.match(e) {
				return false
			}
		}
		return true
	}
	var out entitySet
	if hasNamed {
		sort.Strings(named)
		for i, e := range named {
			if (i > 0 && named[i-1] == e) || !match(e) {
				continue
			}
			if !strict {
				// Listings answer only entities that exist.
				ws, err := met.topo.Reader.Windows(ctx, met.set, e, Options{Limit: 1, NoLive: true})
				if err != nil {
					return out, err
				}
				if len(ws) == 0 {
					continue
				}
			}
			out.list = append(out.list, e)
		}
		if len(out.list) > limit {
			out.list, out.more = out.list[:limit], true
		}
	} else {
		prefix := ""
		for _, f := range ef {
			if len(f.prefix) > len(prefix) {
				prefix = f.prefix
			}
		}
		list, more, err := met.topo.Reader.listEntities(ctx, met.set, prefix, limit, a.limits.MaxEntityScan, match)
		if errors.Is(err, errEntityScanLimit) {
			if strict {
				return out, badRequest("the entity filter examined %d entities without finishing, the limit: name entities with literal_or, or give a wildcard a longer literal prefix", a.limits.MaxEntityScan)
			}
			err = nil
		}
		if err != nil {
			return out, err
		}
		out.list, out.more = list, more
	}
	if strict && out.more {
		return out, badRequest("the entity filter matches more than %d entities, the limit of one sub-query: narrow it, or name entities with literal_or", limit)
	}
	return out, nil
}

func intersect(a, b []string) []string {
	in := map[string]bool{}
	for _, v := range b {
		in[v] = true
	}
	var out []string
	for _, v := range a {
		if in[v] {
			out = append(out, v)
		}
	}
	return out
}

// errEntityScanLimit reports a listing stopped by its bound on examined entities.
var errEntityScanLimit = errors.New("entity listing stopped at its bound")

// listEntities lists, sorted, up to limit entities that have windows of set (any set when set is
// ""), start with prefix and pass match (nil: all). It does not read the table whole: in each salt
// bucket it reads one row, takes its entity, and jumps past that entity's rows (or to its rows of
// set), so each entity costs one or two one-row reads. It examines at most maxExamined entities,
// and then returns what it found with errEntityScanLimit. more reports that more than limit
// entities matched.
func (r *Reader) listEntities(ctx context.Context, set, prefix string, limit, maxExamined int, match func(string) bool) ([]string, bool, error) {
	var found []string
	examined := 0
	escPrefix := schema.AppendComponent(nil, prefix)
	escPrefix = escPrefix[:len(escPrefix)-2] // without the terminator: a prefix of every matching entity's component
	var escSet []byte
	if set != "" {
		escSet = schema.AppendComponent(nil, set)
	}
	for b := 0; b < max(r.buckets, 1); b++ {
		start := append([]byte{byte(b)}, escPrefix...)
		stop := store.PrefixEnd(start)
		cursor := start
		jumped, last := "", "" // the entity whose rows of set the cursor was moved to; the last one seen
		for {
			if err := ctx.Err(); err != nil {
				return nil, false, err
			}
			var row []byte
			err := r.store.Scan(ctx, store.ScanSpec{Table: r.table, Family: r.family, Start: cursor, Stop: stop, Limit: 1},
				func(k []byte, _ []store.Cell) bool { row = append([]byte(nil), k...); return false })
			if err != nil {
				return nil, false, fmt.Errorf("query: listing entities of %s: %w", r.table, err)
			}
			if row == nil {
				break
			}
			entity, rest, err := schema.ReadComponent(row[1:])
			if err != nil { // not an abacus aggregate row: step over it
				cursor = append(row, 0)
				continue
			}
			entityEnd := store.PrefixEnd(row[:len(row)-len(rest)])
			if entity != last || last == "" {
				last = entity
				if examined++; examined > maxExamined {
					sort.Strings(found)
					return found, false, errEntityScanLimit
				}
			}
			if set != "" && !bytes.HasPrefix(rest, escSet) {
				if jumped != entity && bytes.Compare(rest, escSet) < 0 {
					// Rows of sets sorting before set: jump to this entity's rows of set.
					jumped = entity
					cursor = append(row[:len(row)-len(rest):len(row)-len(rest)], escSet...)
					continue
				}
				cursor = entityEnd // the entity has no rows of set
				continue
			}
			if match == nil || match(entity) {
				found = append(found, entity)
				if len(found) > limit {
					sort.Strings(found)
					return found[:limit], true, nil
				}
			}
			cursor = entityEnd
		}
	}
	sort.Strings(found)
	return found, false, nil
}
