package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The OpenTSDB-compatible API: the HTTP endpoints that Grafana's OpenTSDB data source calls
// (version 2.3 or 2.4 mode), served on the same listener as /api/v1 so that Grafana can chart
// abacus aggregates with no plugin.
//
// Mapping (README, "Grafana"):
//   - metric <topology>.<set>.<aggregate>, e.g. devices.minute.max_temp;
//   - tag entity: one series per entity;
//   - tag quantile: quantile aggregates are one metric with one series per quantile ("0.5",
//     "0.95", ...); quantile is always a group-by key, since a sum or average of different
//     quantiles means nothing;
//   - pseudo tag final ("true" or "false"): selects finished or still-open windows; it filters
//     data points and never appears in a series' tags;
//   - a data point's timestamp is its window's start; open windows (stored or read live from the
//     processors) are answered beside final ones unless a filter on final leaves them out.
//
// Aggregators combine the values of a group's series that share a timestamp, with no
// interpolation: every entity's windows of a tumbling or hopping set start at the same instants.

// OpenTSDBVersion is the OpenTSDB version /api/version reports; Grafana's data source should be
// set to 2.3 (or 2.4 for array data points).
const OpenTSDBVersion = "2.3.0"

// OpenTSDBLimits bound the work one request to the OpenTSDB-compatible API may cause. A request
// past a limit is answered 400 with a message naming the limit, never cut silently.
type OpenTSDBLimits struct {
	// MaxSubQueries is the most sub-queries (metrics) in one /api/query request (default 20).
	MaxSubQueries int
	// MaxEntities is the most entities one sub-query may read (default 200).
	MaxEntities int
	// MaxWindows is the most windows one request reads, over all its sub-queries (default 200,000).
	MaxWindows int
	// MaxPoints is the most data points one answer holds, after downsampling and fill
	// (default 500,000).
	MaxPoints int
	// MaxRange is the longest time range between start and end (default 366 days).
	MaxRange time.Duration
	// MaxLookup is the most results of /api/search/lookup and /api/suggest (default 1,000).
	MaxLookup int
	// MaxEntityScan is the most entities examined when a filter has to list entities rather than
	// name them (wildcards, regexps, no entity filter), each costing one or two one-row reads
	// (default 5,000).
	MaxEntityScan int
	// Timeout bounds one request (default 30 s).
	Timeout time.Duration
}

// EnsureDefaults fills the limits left at zero.
func (l *OpenTSDBLimits) EnsureDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxSubQueries, 20)
	def(&l.MaxEntities, 200)
	def(&l.MaxWindows, 200_000)
	def(&l.MaxPoints, 500_000)
	def(&l.MaxLookup, 1000)
	def(&l.MaxEntityScan, 5000)
	if l.MaxRange <= 0 {
		l.MaxRange = 366 * 24 * time.Hour
	}
	if l.Timeout <= 0 {
		l.Timeout = 30 * time.Second
	}
}

// tsdbError is an answer in OpenTSDB's error shape, which Grafana shows to the user.
type tsdbError struct {
	Code    int
	Message string
}

func (e *tsdbError) Error() string { return e.Message }

func badRequest(format string, args ...any) error {
	return &tsdbError{Code: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// tsdbAPI serves the OpenTSDB endpoints of one Server.
type tsdbAPI struct {
	s      *Server
	limits OpenTSDBLimits
	// kinds caches, per aggregate table and set, which aggregates are quantiles and with which
	// quantiles, learned from stored windows: the topology description does not say, and a
	// running topology never changes an aggregate's kind.
	kinds sync.Map // kindsKey -> map[string][]float64 (aggregate -> quantiles; nil for numbers)
}

type kindsKey struct {
	r   *Reader
	set string
}

// mountOpenTSDB adds the OpenTSDB endpoints to mux, for GET and POST as OpenTSDB takes either.
// Paths are also answered with a trailing slash, as OpenTSDB does (some clients always send one).
func (s *Server) mountOpenTSDB(mux *http.ServeMux, requests *prometheus.CounterVec, latency *prometheus.HistogramVec) {
	api := &tsdbAPI{s: s, limits: s.OpenTSDB}
	api.limits.EnsureDefaults()
	routes := map[string]func(r *http.Request) (any, error){
		"/api/query":          api.query,
		"/api/suggest":        api.suggest,
		"/api/search/lookup":  api.lookup,
		"/api/aggregators":    func(*http.Request) (any, error) { return aggregatorNames(), nil },
		"/api/config/filters": func(*http.Request) (any, error) { return filterDocs, nil },
		"/api/version":        api.version,
	}
	for path, h := range routes {
		endpoint := "opentsdb" + strings.ReplaceAll(strings.TrimPrefix(path, "/api"), "/", "_")
		serve := func(w http.ResponseWriter, r *http.Request) {
			t0 := time.Now()
			code := api.serve(w, r, h)
			requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
			latency.WithLabelValues(endpoint).Observe(time.Since(t0).Seconds())
		}
		// Methods are part of the patterns so that they do not conflict with the dashboard's "GET /";
		// other methods get the mux's 405.
		for _, m := range []string{"GET ", "POST "} {
			mux.HandleFunc(m+path, serve)
			mux.HandleFunc(m+path+"/{$}", serve)
		}
	}
}

// serve runs one endpoint and writes its answer or its error in OpenTSDB's shape.
func (a *tsdbAPI) serve(w http.ResponseWriter, r *http.Request, h func(*http.Request) (any, error)) int {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		return a.writeError(w, &tsdbError{Code: http.StatusMethodNotAllowed,
			Message: "method " + r.Method + " is not allowed: abacus only reads (GET or POST)"})
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.limits.Timeout)
	defer cancel()
	body, err := h(r.WithContext(ctx))
	if err != nil {
		return a.writeError(w, err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if raw, ok := body.(rawJSON); ok {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(raw)
		return http.StatusOK
	}
	writeJSON(w, http.StatusOK, body)
	return http.StatusOK
}

// rawJSON is an answer already encoded (the query results, whose data points are written by hand
// to keep them in time order).
type rawJSON []byte

func (a *tsdbAPI) writeError(w http.ResponseWriter, err error) int {
	var te *tsdbError
	switch {
	case errors.As(err, &te):
	case errors.Is(err, ErrInvalid):
		te = &tsdbError{Code: http.StatusBadRequest, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		te = &tsdbError{Code: http.StatusServiceUnavailable,
			Message: fmt.Sprintf("the request took longer than its limit of %s: ask for fewer entities or a shorter range", a.limits.Timeout)}
	default:
		a.s.Logger.Error("opentsdb request failed", "err", err)
		te = &tsdbError{Code: http.StatusServiceUnavailable, Message: err.Error()}
	}
	type body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(te.Code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // messages quote <topology>.<set>.<aggregate> and filter syntax
	_ = enc.Encode(map[string]body{"error": {te.Code, te.Message}})
	return te.Code
}

// params merges the query string and, for POST, a JSON object body, as OpenTSDB reads its
// parameters from either.
func params(r *http.Request, limit int64) (url.Values, map[string]json.RawMessage, error) {
	q := r.URL.Query()
	if r.Method != http.MethodPost {
		return q, nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) || int64(len(b)) > limit {
		return nil, nil, &tsdbError{Code: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("request body over the limit of %d bytes (%s)", limit, limitMaxBodyBytes)}
	}
	if err != nil {
		return nil, nil, badRequest("reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return q, nil, nil
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, nil, badRequest("the request body is not a JSON object: %v", err)
	}
	return q, body, nil
}

// param reads a parameter from the query string or the body (strings and numbers).
func param(q url.Values, body map[string]json.RawMessage, names ...string) (string, bool, error) {
	for _, n := range names {
		if v, ok := q[n]; ok && len(v) > 0 {
			return v[0], true, nil
		}
	}
	for _, n := range names {
		raw, ok := body[n]
		if !ok || string(raw) == "null" {
			continue
		}
		var v any
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return "", false, badRequest("parameter %s: %v", n, err)
		}
		switch v := v.(type) {
		case string:
			return v, true, nil
		case json.Number:
			return v.String(), true, nil
		case bool:
			return strconv.FormatBool(v), true, nil
		}
		return "", false, badRequest("parameter %s: want a string or a number, got %s", n, raw)
	}
	return "", false, nil
}

func boolParam(q url.Values, body map[string]json.RawMessage, names ...string) (bool, error) {
	v, ok, err := param(q, body, names...)
	if err != nil || !ok {
		return false, err
	}
	if v == "" { // "?arrays" alone, as OpenTSDB's query-string flags are written
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("parameter %s: want true or false, got %q", names[0], v)
	}
	return b, nil
}

func intParam(q url.Values, body map[string]json.RawMessage, def int, names ...string) (int, error) {
	v, ok, err := param(q, body, names...)
	if err != nil || !ok || v == "" {
		return def, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, badRequest("parameter %s: want a whole number, got %q", names[0], v)
	}
	return n, nil
}

// ---- /api/version, /api/aggregators, /api/config/filters ----

func (a *tsdbAPI) version(*http.Request) (any, error) {
	return map[string]string{
		"version": OpenTSDBVersion, "short_revision": "abacus", "full_revision": "abacus",
		"repo": "github.com/abacus-stream/abacus", "host": "abacus", "user": "abacus",
		"repo_status": "abacus OpenTSDB-compatible query API", "timestamp": "0",
	}, nil
}

type filterDoc struct {
	Examples    string `json:"examples"`
	Description string `json:"description"`
}

// filterDocs is what /api/config/filters lists: the filter types abacus evaluates. Grafana takes
// the keys as the filter types it offers.
var filterDocs = map[string]filterDoc{
	"literal_or":      {`entity=literal_or(device-001|device-002)`, "Exact values separated by |, case sensitive. Names entities directly: no listing of entities."},
	"iliteral_or":     {`entity=iliteral_or(DEVICE-001)`, "Exact values separated by |, ignoring case."},
	"not_literal_or":  {`entity=not_literal_or(device-001)`, "Every value but these, case sensitive."},
	"not_iliteral_or": {`entity=not_iliteral_or(device-001)`, "Every value but these, ignoring case."},
	"wildcard":        {`entity=wildcard(device-0*)`, "Glob with * (case sensitive); * alone matches every value. A literal prefix before the first * narrows the listing of entities."},
	"iwildcard":       {`entity=iwildcard(DEVICE-0*)`, "Glob with *, ignoring case."},
	"regexp":          {`entity=regexp(device-0[0-4].*)`, "RE2 regular expression, matched anywhere in the value unless anchored."},
	"not_key":         {`quantile=not_key()`, "Series that do not have the tag key (e.g. the non-quantile metrics)."},
}

// ---- metrics ----

// tsdbMetric is one OpenTSDB metric: an aggregate of a set of a topology.
type tsdbMetric struct {
	name string
	topo *Topology
	set  string
	agg  string
}

func (a *tsdbAPI) metrics() []tsdbMetric {
	var out []tsdbMetric
	for i := range a.s.Topologies {
		t := &a.s.Topologies[i]
		for _, set := range t.Sets {
			for _, agg := range set.Aggregates {
				out = append(out, tsdbMetric{name: t.Name + "." + set.Name + "." + agg, topo: t, set: set.Name, agg: agg})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (a *tsdbAPI) metric(name string) (tsdbMetric, error) {
	for _, m := range a.metrics() {
		if m.name == name {
			return m, nil
		}
	}
	return tsdbMetric{}, badRequest("No such name for 'metrics': '%s' (abacus metrics are <topology>.<set>.<aggregate>; /api/suggest?type=metrics lists them)", name)
}

// ---- /api/suggest ----

// Tag keys of abacus series; final is a pseudo key that selects data points.
const (
	tagEntity   = "entity"
	tagQuantile = "quantile"
	tagFinal    = "final"
)

func (a *tsdbAPI) suggest(r *http.Request) (any, error) {
	q, body, err := params(r, a.s.Limits.MaxBodyBytes)
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
	if maxN <= 0 || maxN > a.limits.MaxLookup {
		maxN = a.limits.MaxLookup
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
		for _, k := range []string{tagEntity, tagFinal, tagQuantile} {
			add(k)
		}
	case "tagv":
		vals := map[string]bool{"true": true, "false": true}
		for i := range a.s.Topologies {
			t := &a.s.Topologies[i]
			for _, set := range t.Sets {
				kinds, err := a.setKinds(r.Context(), t.Reader, set.Name)
				if err != nil {
					return nil, err
				}
				for _, qs := range kinds {
					for _, q := range qs {
						vals[formatQuantile(q)] = true
					}
				}
			}
			// Listed up to MaxLookup and cut after sorting, so that the first values come first.
			list, _, err := t.Reader.listEntities(r.Context(), "", prefix, a.limits.MaxLookup, a.limits.MaxEntityScan, nil)
			if errors.Is(err, errEntityScanLimit) {
				err = nil // suggestions may be partial
			}
			if err != nil {
				return nil, err
			}
			for _, e := range list {
				vals[e] = true
			}
		}
		sorted := make([]string, 0, len(vals))
		for v := range vals {
			sorted = append(sorted, v)
		}
		sort.Strings(sorted)
		for _, v := range sorted {
			if !add(v) {
				break
			}
		}
	default:
		return nil, badRequest("parameter type: want metrics, tagk or tagv, got %q", typ)
	}
	return out, nil
}

// ---- /api/search/lookup ----

type lookupResult struct {
	Metric string            `json:"metric"`
	Tags   map[string]string `json:"tags"`
	TSUID  string            `json:"tsuid"`
}

// lookup lists the series of a metric that match tag values: m=<metric>{<tagk>=<value>,...}, where
// a value is exact, * (any) or a glob. Grafana reads tag keys (m=<metric>) and tag values
// (m=<metric>{entity=*}) for its template variables from it.
func (a *tsdbAPI) lookup(r *http.Request) (any, error) {
	t0 := time.Now()
	q, body, err := params(r, a.s.Limits.MaxBodyBytes)
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
	if limit <= 0 || limit > a.limits.MaxLookup {
		limit = a.limits.MaxLookup
	}
	name, tags := m, ""
	if i := strings.IndexByte(m, '{'); i >= 0 {
		if !strings.HasSuffix(m, "}") {
			return nil, badRequest("parameter m: %q has no closing }", m)
		}
		name, tags = m[:i], m[i+1:len(m)-1]
	}
	type pair struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	pairs := []pair{}
	var filters []tagFilter
	for _, kv := range splitTop(tags, ',') {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, badRequest("parameter m: tag %q is not <tagk>=<value>", kv)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		pairs = append(pairs, pair{k, v})
		typ := "literal_or"
		if strings.Contains(v, "*") {
			typ = "wildcard"
		}
		f, err := newTagFilter(typ, k, v, true)
		if err != nil {
			return nil, err
		}
		filters = append(filters, f)
	}
	var metrics []tsdbMetric
	if name == "" || name == "*" {
		metrics = a.metrics()
	} else {
		met, err := a.metric(name)
		if err != nil {
			return nil, err
		}
		metrics = []tsdbMetric{met}
	}
	results := []lookupResult{}
	total := 0
	for _, met := range metrics {
		ents, err := a.entities(r.Context(), met, filters, limit, false)
		if err != nil {
			return nil, err
		}
		series, err := a.seriesTags(r.Context(), met, ents.list)
		if err != nil {
			return nil, err
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
	return map[string]any{"type": "LOOKUP", "metric": name, "tags": pairs, "limit": limit,
		"time": time.Since(t0).Milliseconds(), "results": results, "startIndex": 0, "totalResults": total}, nil
}

// seriesTags lists the tags of a metric's series for the given entities: one per entity, or one
// per entity and quantile for a quantile aggregate.
func (a *tsdbAPI) seriesTags(ctx context.Context, met tsdbMetric, entities []string) ([]map[string]string, error) {
	kinds, err := a.setKinds(ctx, met.topo.Reader, met.set)
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, e := range entities {
		qs := kinds[met.agg]
		if len(qs) == 0 {
			out = append(out, map[string]string{tagEntity: e})
			continue
		}
		for _, q := range qs {
			out = append(out, map[string]string{tagEntity: e, tagQuantile: formatQuantile(q)})
		}
	}
	return out, nil
}

// setKinds returns, for the aggregates of a set that hold quantiles, their quantiles, read once
// from the newest window of the first entity found and then cached.
func (a *tsdbAPI) setKinds(ctx context.Context, r *Reader, set string) (map[string][]float64, error) {
	key := kindsKey{r, set}
	if v, ok := a.kinds.Load(key); ok {
		return v.(map[string][]float64), nil
	}
	ents, _, err := r.listEntities(ctx, set, "", 1, a.limits.MaxEntityScan, nil)
	if err != nil || len(ents) == 0 {
		return nil, err // nothing stored yet: learn later
	}
	ws, err := r.Windows(ctx, set, ents[0], Options{Limit: 1, NoLive: true})
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	kinds := a.learnKinds(key, ws[0])
	return kinds, nil
}

// learnKinds records the quantile aggregates of a window's set.
func (a *tsdbAPI) learnKinds(key kindsKey, w Window) map[string][]float64 {
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

// ---- tag filters ----

// tagFilter is one OpenTSDB filter on a tag key.
type tagFilter struct {
	Type    string `json:"type"`
	Tagk    string `json:"tagk"`
	Filter  string `json:"filter"`
	GroupBy bool   `json:"groupBy"`
	match   func(v string) bool
	// prefix is a literal every matching value starts with ("" when unknown): it narrows the
	// listing of entities.
	prefix string
	// literals are the exact values a case-sensitive literal_or names: entities are read
	// directly, without listing.
	literals []string
}

func newTagFilter(typ, tagk, expr string, groupBy bool) (tagFilter, error) {
	f := tagFilter{Type: typ, Tagk: tagk, Filter: expr, GroupBy: groupBy}
	switch tagk {
	case tagEntity, tagQuantile, tagFinal:
	default:
		return f, badRequest("No such name for 'tagk': '%s' (abacus series have the tag keys %s and %s, and the pseudo key %s)",
			tagk, tagEntity, tagQuantile, tagFinal)
	}
	values := strings.Split(expr, "|")
	set := func(fold bool) map[string]bool {
		m := map[string]bool{}
		for _, v := range values {
			if fold {
				v = strings.ToLower(v)
			}
			m[v] = true
		}
		return m
	}
	switch typ {
	case "literal_or":
		m := set(false)
		f.match = func(v string) bool { return m[v] }
		f.literals = values
	case "iliteral_or":
		m := set(true)
		f.match = func(v string) bool { return m[strings.ToLower(v)] }
	case "not_literal_or":
		m := set(false)
		f.match = func(v string) bool { return !m[v] }
	case "not_iliteral_or":
		m := set(true)
		f.match = func(v string) bool { return !m[strings.ToLower(v)] }
	case "wildcard", "iwildcard":
		if !strings.Contains(expr, "*") {
			return f, badRequest("filter %s(%s) on %s: a wildcard filter needs at least one *", typ, expr, tagk)
		}
		fold := typ == "iwildcard"
		pat := expr
		if fold {
			pat = strings.ToLower(pat)
		} else {
			f.prefix = pat[:strings.IndexByte(pat, '*')]
		}
		parts := strings.Split(pat, "*")
		f.match = func(v string) bool {
			if fold {
				v = strings.ToLower(v)
			}
			return globMatch(parts, v)
		}
	case "regexp":
		re, err := regexp.Compile(expr)
		if err != nil {
			return f, badRequest("filter regexp(%s) on %s: %v", expr, tagk, err)
		}
		if strings.HasPrefix(expr, "^") { // unanchored, a match may start anywhere in the value
			f.prefix, _ = re.LiteralPrefix()
		}
		f.match = re.MatchString
	case "not_key":
		f.match = nil // evaluated on the series' keys (matchSeries)
	default:
		return f, badRequest("unknown filter type %q (/api/config/filters lists those abacus has)", typ)
	}
	return f, nil
}

// globMatch matches v against a pattern split at its *s.
func globMatch(parts []string, v string) bool {
	if len(parts) == 1 {
		return v == parts[0]
	}
	if !strings.HasPrefix(v, parts[0]) {
		return false
	}
	v = v[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return strings.HasSuffix(v, last) && len(v) >= len(last)
}

// matchSeries reports whether a series' tags pass every filter (final, a pseudo key on data
// points, is left to the points). With explicit, the series must have no tag key beyond the
// filters'.
func matchSeries(filters []tagFilter, tags map[string]string, explicit bool) bool {
	keys := map[string]bool{}
	for _, f := range filters {
		if f.Tagk == tagFinal {
			continue
		}
		keys[f.Tagk] = true
		v, ok := tags[f.Tagk]
		if f.Type == "not_key" {
			if ok {
				return false
			}
			continue
		}
		if !ok || !f.match(v) {
			return false
		}
	}
	if explicit {
		for k := range tags {
			if !keys[k] {
				return false
			}
		}
	}
	return true
}

// splitTop splits s at sep outside parentheses, so that regexp(a{1,3}) or literal_or(a|b) stay
// whole.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth > 0 {
				depth--
			}
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
