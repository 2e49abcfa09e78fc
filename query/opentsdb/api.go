// Package opentsdb is the OpenTSDB-compatible API over the readers of package query: the HTTP
// endpoints that Grafana's OpenTSDB data source calls (version 2.3 or 2.4 mode), which the query
// server (query/httpapi) mounts on the same listener as /api/v1 so that Grafana can chart abacus
// aggregates with no plugin.
//
// Mapping (docs/QUERYING.md, "Grafana"):
//   - metric <topology>.<set>.<aggregate>, e.g. devices.minute.max_temp;
//   - tag entity: one series per entity;
//   - a rollup set (topology By) has its dimension as tag key instead: region=eu-west, one series
//     per key; a global rollup (topology Global) is one series with no tag (its rows are stored
//     under query.GlobalKey, read with no filter). A filter on a tag key the metric's series
//     cannot have (entity on a rollup by region, any key but quantile and final on a global
//     rollup) is refused with a message saying which key the metric has, rather than answered
//     empty: a panel built for another set should say why it shows nothing;
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
package opentsdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/prometheus/client_golang/prometheus"
)

// Version is the OpenTSDB version /api/version reports; Grafana's data source should be
// set to 2.3 (or 2.4 for array data points).
const Version = "2.3.0"

// limitMaxBodyBytes names the body size limit in messages, as the config spells it (the HTTP
// server's Limits.MaxBodyBytes, given to the API as MaxBodyBytes).
const limitMaxBodyBytes = "query.limits.max_body_bytes"

// Limits bound the work one request to the OpenTSDB-compatible API may cause. A request
// past a limit is answered 400 with a message naming the limit, never cut silently.
type Limits struct {
	// MaxSubQueries is the most sub-queries (metrics) in one /api/query request (default 20).
	MaxSubQueries int
	// MaxEntities is the most entities one sub-query may read (default 100,000). They are read a
	// few at a time and folded into the answer's groups as they come, so memory does not grow
	// with it: it bounds work, as MaxWindows and Timeout do.
	MaxEntities int
	// MaxWindows is the most windows one request reads, over all its sub-queries (default
	// 5,000,000: about ten seconds of HBase scans on the project's two-core test machine).
	MaxWindows int
	// MaxPoints is the most data points one answer holds, after downsampling and fill
	// (default 500,000).
	MaxPoints int
	// MaxRange is the longest time range between start and end (default 366 days).
	MaxRange time.Duration
	// MaxLookup is the most results of /api/search/lookup and /api/suggest (default 1,000).
	MaxLookup int
	// MaxEntityScan is the most entities examined when a filter has to list entities rather than
	// name them (wildcards, regexps, no entity filter): one key-index row each, or one or two
	// one-row reads each where the table has no complete key index (default 100,000).
	MaxEntityScan int
	// Timeout bounds one request (default 30 s).
	Timeout time.Duration
}

// EnsureDefaults fills the limits left at zero.
func (l *Limits) EnsureDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxSubQueries, 20)
	def(&l.MaxEntities, 100_000)
	def(&l.MaxWindows, 5_000_000)
	def(&l.MaxPoints, 500_000)
	def(&l.MaxLookup, 1000)
	def(&l.MaxEntityScan, 100_000)
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

// Error is the message alone: it is what Grafana shows, so it must read as an answer to the user.
func (e *tsdbError) Error() string { return e.Message }

func badRequest(format string, args ...any) error {
	return &tsdbError{Code: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// API serves the OpenTSDB-compatible API over the topologies it is given. Set its fields, then
// Mount it; it must not be copied after.
type API struct {
	// Topologies are what the API serves, each topology's metrics named after it.
	Topologies []query.Served
	// Limits bound the work of one request (zero: the defaults).
	Limits Limits
	// MaxBodyBytes bounds a POSTed body (query.limits.max_body_bytes; 1 MiB when 0).
	MaxBodyBytes int64
	// Now is the clock for relative times ("1h-ago"); time.Now when nil.
	Now func() time.Time
	// Logger gets the failures that clients are answered without details; slog.Default when nil.
	Logger *slog.Logger
	// NoCoarser reads every sub-query from the set its metric names, never from a coarser form
	// of it (query.Reader.Coarsened): the answers are the same, only slower; tests compare the two.
	NoCoarser bool

	// kinds caches, per aggregate table and set, which aggregates are quantiles and with which
	// quantiles, learned from stored windows: the topology description does not say, and a
	// running topology never changes an aggregate's kind.
	kinds sync.Map // kindsKey -> map[string][]float64 (aggregate -> quantiles; nil for numbers)
	// kindsMissed holds, per aggregate table and set, when a look for a stored window found none:
	// the look is not repeated for kindsRecheck, since without a complete key index it walks
	// every entity's rows (600 reads at every suggestion for a set with nothing stored yet).
	kindsMissed sync.Map // kindsKey -> time.Time
}

// kindsRecheck is how long a set found with no stored window is not looked at again.
const kindsRecheck = 30 * time.Second

type kindsKey struct {
	r   *query.Reader
	set string
}

// Mount adds the OpenTSDB endpoints to mux, for GET and POST as OpenTSDB takes either, and counts
// each request into requests (labels endpoint and code) and latency (label endpoint), with
// endpoints named opentsdb_<path> ("opentsdb_query", "opentsdb_search_lookup"). Paths are also
// answered with a trailing slash, as OpenTSDB does (some clients always send one). Methods are
// part of the patterns, so that they do not conflict with a "GET /" mounted beside them (the
// dashboard); other methods get the mux's 405.
func (a *API) Mount(mux *http.ServeMux, requests *prometheus.CounterVec, latency *prometheus.HistogramVec) {
	a.Limits.EnsureDefaults()
	if a.MaxBodyBytes <= 0 {
		a.MaxBodyBytes = 1 << 20
	}
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Logger == nil {
		a.Logger = slog.Default()
	}
	routes := map[string]func(r *http.Request) (any, error){
		"/api/query":          a.query,
		"/api/suggest":        a.suggest,
		"/api/search/lookup":  a.lookup,
		"/api/aggregators":    func(*http.Request) (any, error) { return aggregatorNames(), nil },
		"/api/config/filters": func(*http.Request) (any, error) { return filterDocs, nil },
		"/api/version":        a.version,
	}
	for path, h := range routes {
		endpoint := "opentsdb" + strings.ReplaceAll(strings.TrimPrefix(path, "/api"), "/", "_")
		serve := func(w http.ResponseWriter, r *http.Request) {
			t0 := time.Now()
			code := a.serve(w, r, h)
			requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
			latency.WithLabelValues(endpoint).Observe(time.Since(t0).Seconds())
		}
		for _, m := range []string{"GET ", "POST "} {
			mux.HandleFunc(m+path, serve)
			mux.HandleFunc(m+path+"/{$}", serve)
		}
	}
}

// serve runs one endpoint and writes its answer or its error in OpenTSDB's shape.
func (a *API) serve(w http.ResponseWriter, r *http.Request, h func(*http.Request) (any, error)) int {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		return a.writeError(w, &tsdbError{Code: http.StatusMethodNotAllowed,
			Message: "method " + r.Method + " is not allowed: abacus only reads (GET or POST)"})
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.Limits.Timeout)
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

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// rawJSON is an answer already encoded (the query results, whose data points are written by hand
// to keep them in time order).
type rawJSON []byte

func (a *API) writeError(w http.ResponseWriter, err error) int {
	var te *tsdbError
	switch {
	case errors.As(err, &te):
	case errors.Is(err, query.ErrInvalid):
		te = &tsdbError{Code: http.StatusBadRequest, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		te = &tsdbError{Code: http.StatusServiceUnavailable,
			Message: fmt.Sprintf("the request took longer than its limit of %s: ask for fewer entities or a shorter range", a.Limits.Timeout)}
	default:
		a.Logger.Error("opentsdb request failed", "err", err)
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
