package querybench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/query/opentsdb"
)

// panel is one request a dashboard sends, and the check of its answer against the loaded values:
// a wrong answer fails the benchmark rather than looking fast.
type panel struct {
	name   string
	method string
	path   string // with the query string
	body   string // the POST body, as Grafana sends it
	check  func(code int, body []byte) error
	// steady is what of an answer must be the same every time the request is asked (see measure);
	// nil: all of it.
	steady func(body []byte) []byte
}

// elapsedField is the "time" member of a /api/search/lookup answer: how long the server took.
var elapsedField = regexp.MustCompile(`"time":[0-9]+`)

// withoutElapsed is a lookup answer but for how long it took.
func withoutElapsed(body []byte) []byte { return elapsedField.ReplaceAll(body, nil) }

// expected are the values the panels must answer, computed again from windowAt rather than
// kept from the load, so a run over a table loaded by an earlier run checks it just the same.
type expected struct {
	s          size
	fleet      *rollup // over the last 24 h, by minute
	regions    map[string]*rollup
	hourlyOnce sync.Once
	hourly     []int64 // every entity's readings by the hour of the history (hourlyCount)
}

const day = 24 * 60

func newExpected(s size) *expected {
	ex := &expected{s: s, fleet: newRollup(day), regions: map[string]*rollup{}}
	first := s.minutes() - day
	for e := range s.entities {
		r := ex.regions[devices.RegionOf(entityName(e))]
		if r == nil {
			r = newRollup(day)
			ex.regions[devices.RegionOf(entityName(e))] = r
		}
		for m := range day {
			w := windowAt(e, first+m)
			ex.fleet.add(m, w)
			r.add(m, w)
		}
	}
	return ex
}

// minuteIndex is the history minute of a data point's timestamp (OpenTSDB answers seconds).
func (ex *expected) minuteIndex(sec int64) int {
	return int((sec*1000 - ex.s.start()) / 60_000)
}

// tsdbSeries is one series of an /api/query answer (Grafana's 2.3 mode: dps as an object).
type tsdbSeries struct {
	Metric string            `json:"metric"`
	Tags   map[string]string `json:"tags"`
	DPS    dataPoints        `json:"dps"`
}

// dataPoints are a series' "dps" object, {"<unix s>": value, ...}, in the order written (in time
// order when read through the fallback). They are read without a map: the answers are checked in
// the benchmark's process, beside the query server it measures, and a map entry per point
// (144,000 for a fleet panel) was most of the process's garbage and half its CPU.
type dataPoints []dataPoint

type dataPoint struct {
	sec int64
	v   float64
}

// UnmarshalJSON reads the object; anything but "<digits>": number-or-null pairs goes through a
// map, as encoding/json reads it.
func (d *dataPoints) UnmarshalJSON(b []byte) error {
	if pts, ok := scanDataPoints(b); ok {
		*d = pts
		return nil
	}
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*d = (*d)[:0]
	for k, v := range m {
		sec, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return fmt.Errorf("data point key %q: %w", k, err)
		}
		*d = append(*d, dataPoint{sec, v})
	}
	slices.SortFunc(*d, func(a, b dataPoint) int { return cmp.Compare(a.sec, b.sec) })
	return nil
}

// scanDataPoints reads {"<digits>":<number or null>,...} with no spaces, as both servers write it.
func scanDataPoints(b []byte) (dataPoints, bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	b = b[1 : len(b)-1]
	var out dataPoints
	for len(b) > 0 {
		if b[0] != '"' {
			return nil, false
		}
		end := bytes.IndexByte(b[1:], '"') + 1
		if end <= 0 || end+1 >= len(b) || b[end+1] != ':' {
			return nil, false
		}
		sec, err := strconv.ParseInt(string(b[1:end]), 10, 64)
		if err != nil {
			return nil, false
		}
		b = b[end+2:]
		n := bytes.IndexByte(b, ',')
		if n < 0 {
			n = len(b)
		}
		var v float64
		if num := string(b[:n]); num != "null" {
			if v, err = strconv.ParseFloat(num, 64); err != nil {
				return nil, false
			}
		}
		out = append(out, dataPoint{sec, v})
		b = b[n:]
		if len(b) > 0 {
			b = b[1:]
			if len(b) == 0 {
				return nil, false // a trailing comma
			}
		}
	}
	return out, true
}

// seriesOf is parseSeries, failing unless the answer holds exactly n series.
func seriesOf(code int, body []byte, n int) ([]tsdbSeries, error) {
	ss, err := parseSeries(code, body)
	if err == nil && len(ss) != n {
		err = fmt.Errorf("%d series, want %d", len(ss), n)
	}
	return ss, err
}

func parseSeries(code int, body []byte) ([]tsdbSeries, error) {
	if code != http.StatusOK {
		return nil, fmt.Errorf("status %d: %.300s", code, body)
	}
	var out []tsdbSeries
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	return out, nil
}

// points checks that a series holds exactly one point per bucket of width minutes over the last
// span minutes, each equal (within tol) to want of the bucket's first history minute.
func (ex *expected) points(s tsdbSeries, span, width int, tol float64, want func(m int) float64) error {
	if len(s.DPS) != span/width {
		return fmt.Errorf("series %v: %d points, want %d", s.Tags, len(s.DPS), span/width)
	}
	seen := make([]bool, span)
	for _, p := range s.DPS {
		m := ex.minuteIndex(p.sec)
		if m < ex.s.minutes()-span || m >= ex.s.minutes() {
			return fmt.Errorf("series %v: point at %d outside the range", s.Tags, p.sec)
		}
		if seen[m-(ex.s.minutes()-span)] {
			return fmt.Errorf("series %v: two points in minute %d", s.Tags, m)
		}
		seen[m-(ex.s.minutes()-span)] = true
		if w := want(m); math.Abs(p.v-w) > tol {
			return fmt.Errorf("series %v: point at %d is %v, want %v", s.Tags, p.sec, p.v, w)
		}
	}
	return nil
}

// maxOver is entity e's highest reading in the width minutes from m.
func maxOver(e, m, width int) float64 {
	mx := math.Inf(-1)
	for i := range width {
		mx = max(mx, windowAt(e, m+i).max)
	}
	return mx
}

func avgOf(e, m, width int, f func(minuteOf) float64) float64 {
	var sum float64
	for i := range width {
		sum += f(windowAt(e, m+i))
	}
	return sum / float64(width)
}

// grafanaQuery is the body Grafana's OpenTSDB data source (version 2.3 mode) posts for a panel
// with one query: start and end in ms, filters rather than tags, showQuery to map answers back.
func grafanaQuery(from, to time.Time, metric, aggregator, downsample string, filters ...map[string]any) string {
	q := map[string]any{"metric": metric, "aggregator": aggregator}
	if downsample != "" {
		q["downsample"] = downsample
	}
	if len(filters) > 0 {
		q["filters"] = filters
	}
	b, _ := json.Marshal(map[string]any{"start": from.UnixMilli(), "end": to.UnixMilli(), "queries": []any{q},
		"msResolution": false, "globalAnnotations": true, "showQuery": true})
	return string(b)
}

func filter(typ, tagk, f string, groupBy bool) map[string]any {
	return map[string]any{"type": typ, "tagk": tagk, "filter": f, "groupBy": groupBy}
}

// panels are the requests of the benchmark's dashboards. pick chooses the entities of one
// dashboard's round, so that concurrent dashboards do not all read the same rows.
func (ex *expected) panels(pick int) []panel {
	s := ex.s
	e := pick % s.entities
	ent := entityName(e)
	now := end
	metric := func(set, agg string) string { return topoName + "." + set + "." + agg }
	var ps []panel

	one := func(name string, span, width int, ds string, want func(m int) float64) {
		ps = append(ps, panel{name: name, method: http.MethodPost, path: "/api/query",
			body: grafanaQuery(now.Add(-time.Duration(span)*time.Minute), now, metric(setMinute, "max_temp"), "sum", ds,
				filter("literal_or", "entity", ent, false)),
			check: func(code int, body []byte) error {
				ss, err := seriesOf(code, body, 1)
				if err != nil {
					return err
				}
				return ex.points(ss[0], span, width, 1e-9, want)
			}})
	}
	avgMax := func(m int) float64 { return avgOf(e, m, 1, func(w minuteOf) float64 { return w.max }) }
	one("tsdb 1 entity 1h (1m-avg)", 60, 1, "1m-avg", avgMax)
	one("tsdb 1 entity 24h (1m-avg)", day, 1, "1m-avg", avgMax)
	// The peak of every 10 minutes, as OpenTSDB is asked it: read from the minute set's coarser
	// form of 10 minutes (until 2026-12-07 this panel asked 10m-avg of the minutes' maxima).
	one("tsdb 1 entity 7d (10m-max)", s.minutes(), 10, "10m-max", func(m int) float64 { return maxOver(e, m, 10) })

	ps = append(ps, panel{name: "tsdb 1 entity 7d hourly set", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-time.Duration(s.minutes())*time.Minute), now, metric(setHour, "sum_temp"), "sum", "",
			filter("literal_or", "entity", ent, false)),
		check: func(code int, body []byte) error {
			ss, err := seriesOf(code, body, 1)
			if err != nil {
				return err
			}
			return ex.points(ss[0], s.minutes(), 60, 0, func(m int) float64 {
				var sum float64
				for i := range 60 {
					sum += windowAt(e, m+i).sum
				}
				return sum
			})
		}})

	ps = append(ps, panel{name: "tsdb 1 entity 24h quantiles", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-day*time.Minute), now, metric(setMinute, "temp_quantiles"), "sum", "1m-avg",
			filter("literal_or", "entity", ent, false)),
		check: func(code int, body []byte) error {
			ss, err := parseSeries(code, body)
			if err != nil {
				return err
			}
			if len(ss) != 3 {
				return fmt.Errorf("%d series, want 3 (one per quantile)", len(ss))
			}
			for _, sr := range ss {
				k := map[string]int{"0.5": 0, "0.95": 1, "0.99": 2}
				i, ok := k[sr.Tags["quantile"]]
				if !ok {
					return fmt.Errorf("series tags %v", sr.Tags)
				}
				if err := ex.points(sr, day, 1, 0, func(m int) float64 { return windowAt(e, m).q[i] }); err != nil {
					return err
				}
			}
			return nil
		}})

	fifty, names := ex.fiftyOf(e)
	ps = append(ps, panel{name: "tsdb 50 entities 24h summed", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-day*time.Minute), now, metric(setMinute, "count"), "sum", "1m-sum",
			filter("literal_or", "entity", strings.Join(names, "|"), false)),
		check: ex.countsOf(fifty)})
	ps = append(ps, panel{name: "tsdb 50 entities 24h grouped", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-day*time.Minute), now, metric(setMinute, "max_temp"), "sum", "1m-avg",
			filter("literal_or", "entity", strings.Join(names, "|"), true)),
		check: ex.maximaOf(fifty, names)})

	ps = append(ps, panel{name: "tsdb all entities 24h (wildcard)", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-day*time.Minute), now, metric(setMinute, "count"), "sum", "1m-sum",
			filter("wildcard", "entity", "*", false)),
		check: func(code int, body []byte) error {
			// Every entity is read, a few at a time, and summed as it comes: answered, and it must
			// be the fleet's sum, unless it reads more windows than a request may (MaxWindows).
			if s.entities*day <= maxTSDBWindows {
				ss, err := parseSeries(code, body)
				if err != nil {
					return err
				}
				return ex.points(ss[0], day, 1, 0, func(m int) float64 { return float64(ex.fleet.count[m-(s.minutes()-day)]) })
			}
			if code != http.StatusBadRequest || !strings.Contains(string(body), "windows") {
				return fmt.Errorf("want the 400 naming the limit of windows read, got %d: %.300s", code, body)
			}
			return nil
		}})
	ps = append(ps, panel{name: "tsdb all entities 7d (wildcard, 1h-sum)", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-time.Duration(s.minutes())*time.Minute), now, metric(setMinute, "count"), "sum", "1h-sum",
			filter("wildcard", "entity", "*", false)),
		check: ex.weekCounts})
	ps = append(ps, panel{name: "tsdb fleet rollup 24h", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-day*time.Minute), now, metric(setFleet, "count"), "sum", "1m-sum"),
		check: func(code int, body []byte) error {
			ss, err := seriesOf(code, body, 1)
			if err != nil {
				return err
			}
			return ex.points(ss[0], day, 1, 0, func(m int) float64 { return float64(ex.fleet.count[m-(s.minutes()-day)]) })
		}})
	ps = append(ps, panel{name: "tsdb region rollup 24h grouped", method: http.MethodPost, path: "/api/query",
		body: grafanaQuery(now.Add(-day*time.Minute), now, metric(setRegion, "sum_temp"), "sum", "1m-avg",
			filter("wildcard", "region", "*", true)),
		check: func(code int, body []byte) error {
			ss, err := seriesOf(code, body, len(ex.regions))
			if err != nil {
				return err
			}
			for _, sr := range ss {
				r := ex.regions[sr.Tags["region"]]
				if r == nil {
					return fmt.Errorf("series tags %v", sr.Tags)
				}
				if err := ex.points(sr, day, 1, 0, func(m int) float64 { return r.sum[m-(s.minutes()-day)] }); err != nil {
					return err
				}
			}
			return nil
		}})

	ps = append(ps, lookupPanel(metric(setMinute, "count"), min(s.entities, 1000)), ex.suggestPanel(e))

	// The dashboard page's own requests (query/httpapi/web/pickers.js and load.js): its topology list, its entity list
	// (limit 500), and the windows of the chosen entities, newest first, limit 5000 each.
	ps = append(ps, panel{name: "page topologies", method: http.MethodGet, path: "/api/v1/topologies",
		check: func(code int, body []byte) error {
			if code != http.StatusOK || !strings.Contains(string(body), `"`+setFleet+`"`) {
				return fmt.Errorf("status %d: %.300s", code, body)
			}
			return nil
		}})
	ps = append(ps, panel{name: "page entities (limit 500)", method: http.MethodGet,
		path: "/api/v1/entities?" + url.Values{"topology": {topoName}, "set": {setMinute}, "limit": {"500"}}.Encode(),
		check: func(code int, body []byte) error {
			var out struct {
				Entities []string `json:"entities"`
			}
			if code != http.StatusOK {
				return fmt.Errorf("status %d: %.300s", code, body)
			}
			if err := json.Unmarshal(body, &out); err != nil {
				return err
			}
			if len(out.Entities) != min(500, s.entities) {
				return fmt.Errorf("%d entities, want %d", len(out.Entities), min(500, s.entities))
			}
			return nil
		}})
	page := func(name, from string, ents []int, span int) {
		ns := make([]string, len(ents))
		for i, x := range ents {
			ns[i] = entityName(x)
		}
		ps = append(ps, panel{name: name, method: http.MethodGet,
			path: "/api/v1/windows?" + url.Values{"topology": {topoName}, "set": {setMinute}, "entity": {strings.Join(ns, ",")},
				"limit": {"5000"}, "order": {"newest"}, "from": {from}}.Encode(),
			check: func(code int, body []byte) error {
				// Only the count is checked: decoding every value into a map of interfaces was most
				// of this process's CPU, which the query server shares at 16 dashboards.
				var out struct {
					Entities map[string][]struct {
						Start  int64 `json:"start"`
						Values struct {
							Count float64 `json:"count"`
						} `json:"values"`
					} `json:"entities"`
					Truncated bool `json:"truncated"`
				}
				if code != http.StatusOK {
					return fmt.Errorf("status %d: %.300s", code, body)
				}
				if err := json.Unmarshal(body, &out); err != nil {
					return err
				}
				want := min(span, 5000)
				for i, n := range ns {
					ws := out.Entities[n]
					if len(ws) != want {
						return fmt.Errorf("%s: %d windows, want %d", n, len(ws), want)
					}
					for _, w := range ws {
						m := int((w.Start - s.start()) / 60_000)
						if c := w.Values.Count; int64(c) != windowAt(ents[i], m).count {
							return fmt.Errorf("%s at %d: count %v, want %d", n, w.Start, c, windowAt(ents[i], m).count)
						}
					}
				}
				if out.Truncated != (span > 5000) {
					return fmt.Errorf("truncated %v with %d windows in range", out.Truncated, span)
				}
				return nil
			}})
	}
	page("page 1 entity 1h", "-1h", []int{e}, 60)
	page("page 1 entity 24h", "-24h", []int{e}, day)
	page("page 1 entity 7d", fmt.Sprintf("-%dh", s.days*24), []int{e}, s.minutes())
	// 20 is the most entities the page can chart at its limit of 5000 windows each: the API
	// refuses limit x entities above query.limits.max_windows (100,000).
	page("page 20 entities 24h", "-24h", fifty[:min(20, len(fifty))], day)
	return ps
}

// lookupPanel is Grafana's tag_values(entity) request of metric (/api/search/lookup), which must
// answer want series.
func lookupPanel(metric string, want int) panel {
	return panel{name: "tsdb tag_values(entity)", method: http.MethodGet,
		path:   "/api/search/lookup?" + url.Values{"m": {metric + "{entity=*}"}, "limit": {"1000"}}.Encode(),
		steady: withoutElapsed,
		check: func(code int, body []byte) error {
			var out struct {
				Results []struct {
					Tags map[string]string `json:"tags"`
				} `json:"results"`
			}
			if code != http.StatusOK {
				return fmt.Errorf("status %d: %.300s", code, body)
			}
			if err := json.Unmarshal(body, &out); err != nil {
				return err
			}
			if len(out.Results) != want {
				return fmt.Errorf("%d results, want %d", len(out.Results), want)
			}
			return nil
		}}
}

// suggestPanel is the entity picker's /api/suggest for the tag values that start with entity e's
// name cut after "device-000" (100 entities when there are 1,000 or more): every entity with that
// prefix must be among them.
func (ex *expected) suggestPanel(e int) panel {
	prefix := entityName(e)[:len("device-000")]
	want := 0
	for x := range ex.s.entities {
		if strings.HasPrefix(entityName(x), prefix) {
			want++
		}
	}
	return panel{name: "tsdb suggest tagv (entity picker)", method: http.MethodGet,
		path: "/api/suggest?" + url.Values{"type": {"tagv"}, "q": {prefix}, "max": {"1000"}}.Encode(),
		check: func(code int, body []byte) error {
			var out []string
			if code != http.StatusOK {
				return fmt.Errorf("status %d: %.300s", code, body)
			}
			if err := json.Unmarshal(body, &out); err != nil {
				return err
			}
			n := 0
			for _, v := range out {
				if strings.HasPrefix(v, prefix) {
					n++
				}
			}
			if n != want {
				return fmt.Errorf("%d entity values with prefix %s, want %d", n, prefix, want)
			}
			return nil
		}}
}

// fiftyOf is the entities of the 50-entity panels for pick e (all of a smaller fleet), spread
// over the fleet, and their names.
func (ex *expected) fiftyOf(e int) ([]int, []string) {
	n := ex.s.entities
	fifty := make([]int, 0, 50)
	for i := range min(50, n) {
		fifty = append(fifty, (e+i*(n/50+1))%n)
	}
	names := make([]string, len(fifty))
	for i, x := range fifty {
		names[i] = entityName(x)
	}
	return fifty, names
}

// countsOf checks a summed answer over entities: one series, each minute of the last day the sum
// of their counts.
func (ex *expected) countsOf(entities []int) func(code int, body []byte) error {
	return func(code int, body []byte) error {
		ss, err := seriesOf(code, body, 1)
		if err != nil {
			return err
		}
		return ex.points(ss[0], day, 1, 0, func(m int) float64 {
			var n int64
			for _, x := range entities {
				n += windowAt(x, m).count
			}
			return float64(n)
		})
	}
}

// maximaOf checks an answer grouped by entity: one series per entity named, each minute of the
// last day that entity's maximum.
func (ex *expected) maximaOf(entities []int, names []string) func(code int, body []byte) error {
	return func(code int, body []byte) error {
		ss, err := seriesOf(code, body, len(entities))
		if err != nil {
			return err
		}
		idx := map[string]int{}
		for i, n := range names {
			idx[n] = entities[i]
		}
		for _, sr := range ss {
			x, ok := idx[sr.Tags["entity"]]
			if !ok {
				return fmt.Errorf("series tags %v", sr.Tags)
			}
			if err := ex.points(sr, day, 1, 0, func(m int) float64 { return windowAt(x, m).max }); err != nil {
				return err
			}
		}
		return nil
	}
}

// maxTSDBWindows is the most windows one OpenTSDB request may read: the API's default limit, which
// the benchmark's query server keeps.
var maxTSDBWindows = func() int {
	var l opentsdb.Limits
	l.EnsureDefaults()
	return l.MaxWindows
}()

// weekCounts checks the fleet's readings counted by the hour over the whole history.
func (ex *expected) weekCounts(code int, body []byte) error {
	ss, err := seriesOf(code, body, 1)
	if err != nil {
		return err
	}
	return ex.points(ss[0], ex.s.minutes(), 60, 0, func(m int) float64 { return float64(ex.hourlyCount()[m/60]) })
}

// hourlyCount is every entity's readings counted by the hour of the history, computed once.
func (ex *expected) hourlyCount() []int64 {
	ex.hourlyOnce.Do(func() {
		ex.hourly = make([]int64, ex.s.minutes()/60)
		for e := range ex.s.entities {
			for m := range ex.s.minutes() {
				ex.hourly[m/60] += windowAt(e, m).count
			}
		}
	})
	return ex.hourly
}
