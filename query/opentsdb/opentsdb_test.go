package opentsdb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/query/internal/servedtest"
	"github.com/prometheus/client_golang/prometheus"
)

// t0 is the start of the first seeded window; the test server's clock stands an hour later.
var t0 = querytest.T0

const minute = querytest.Minute

// newReader is servedtest.Reader, the name the tests read best.
var newReader = servedtest.Reader

// tsdbServer serves the OpenTSDB API over the seeded table (seedTSDB) with the given limits, its
// clock an hour after t0.
func tsdbServer(t *testing.T, src query.Source, table string, limits Limits) *httptest.Server {
	t.Helper()
	return serveTSDB(t, &API{
		Topologies: []query.Served{{Name: "devices", Reader: newReader(t, src, table), Sets: []query.ServedSet{
			{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count", "mean", "temp_q"}},
			{Name: "hour", Window: "tumbling 1h0m0s", Aggregates: []string{"count"}},
		}}},
		Now:    func() time.Time { return t0.Add(time.Hour) },
		Limits: limits,
	})
}

// tsdbMux mounts api on a mux beside a "GET /", as the HTTP server mounts it beside the dashboard:
// that pattern must neither conflict with the API's nor shadow them.
func tsdbMux(api *API) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /", http.NotFoundHandler())
	api.Mount(mux, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"endpoint", "code"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "latency"}, []string{"endpoint"}))
	return mux
}

// serveTSDB serves api (tsdbMux) until the test ends.
func serveTSDB(t *testing.T, api *API) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(tsdbMux(api))
	t.Cleanup(ts.Close)
	return ts
}

// tsdbSeries is one result of /api/query, with dps in either of OpenTSDB's shapes.
type tsdbSeries struct {
	Metric        string            `json:"metric"`
	Tags          map[string]string `json:"tags"`
	AggregateTags []string          `json:"aggregateTags"`
	Query         *struct {
		Index int `json:"index"`
	} `json:"query"`
	DPS     json.RawMessage `json:"dps"`
	points  map[int64]*float64
	ordered []int64
}

func (s *tsdbSeries) decode(t *testing.T, arrays bool) {
	t.Helper()
	s.points = map[int64]*float64{}
	if arrays {
		var pairs [][2]*float64
		if err := json.Unmarshal(s.DPS, &pairs); err != nil {
			t.Fatalf("dps %s: %v", s.DPS, err)
		}
		for _, p := range pairs {
			ts := int64(*p[0])
			s.points[ts] = p[1]
			s.ordered = append(s.ordered, ts)
		}
		return
	}
	// Object keys in the order written: Grafana's older parsers rely on it.
	dec := json.NewDecoder(bytes.NewReader(s.DPS))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v *float64
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		ts, err := strconv.ParseInt(k.(string), 10, 64)
		if err != nil {
			t.Fatalf("dps key %q: %v", k, err)
		}
		s.points[ts] = v
		s.ordered = append(s.ordered, ts)
	}
}

func (s *tsdbSeries) at(t *testing.T, ts int64) float64 {
	t.Helper()
	v, ok := s.points[ts]
	if !ok || v == nil {
		t.Fatalf("%s%v: no value at %d (have %d points)", s.Metric, s.Tags, ts, len(s.points))
	}
	return *v
}

type tsdbClient struct {
	t    *testing.T
	base string
}

func (c tsdbClient) do(method, path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusMethodNotAllowed && !strings.HasPrefix(ct, "application/json") {
		c.t.Fatalf("%s %s: content type %q: %s", method, path, ct, b)
	}
	return resp.StatusCode, b
}

// query posts an /api/query body (or GETs when body is empty) and decodes the series.
func (c tsdbClient) query(path, body string) []tsdbSeries {
	c.t.Helper()
	method := http.MethodPost
	if body == "" {
		method = http.MethodGet
	}
	code, b := c.do(method, path, body)
	if code != 200 {
		c.t.Fatalf("%s %s: %d %s", path, body, code, b)
	}
	var out []tsdbSeries
	if err := json.Unmarshal(b, &out); err != nil {
		c.t.Fatalf("%s: %v: %s", path, err, b)
	}
	arrays := strings.Contains(path, "arrays=true")
	for i := range out {
		out[i].decode(c.t, arrays)
	}
	return out
}

// fails posts a request that must fail with code and an OpenTSDB error naming want.
func (c tsdbClient) fails(method, path, body string, code int, want string) {
	c.t.Helper()
	got, b := c.do(method, path, body)
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || got != code || e.Error.Code != code || !strings.Contains(e.Error.Message, want) {
		c.t.Fatalf("%s %s %s: %d %s, want %d with a message containing %q", method, path, body, got, b, code, want)
	}
}

func tagsOf(ss []tsdbSeries) string {
	var out []string
	for _, s := range ss {
		var kv []string
		for k, v := range s.Tags {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		out = append(out, "{"+strings.Join(kv, ",")+"}"+strings.Join(s.AggregateTags, ","))
	}
	return strings.Join(out, " ")
}

var (
	sec0 = t0.Unix()
	sec1 = t0.Add(time.Hour).Unix()
)

// TestOpenTSDBGrafanaRequests sends every request shape Grafana's OpenTSDB data source builds
// (its backend in version 2.3 and 2.4 mode, its older in-browser query path, its query editor's
// and template variables' look-ups, its health check and annotation queries) to the embedded cell
// store and to the real HBase, and checks the answers against the seeded windows.
func TestOpenTSDBGrafanaRequests(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.SeedTSDB(t, st, table, 4)
			c := tsdbClient{t, tsdbServer(t, st, table, Limits{}).URL}
			testGrafanaQueries(t, c)
			testGrafanaLookups(t, c)
			testTSDBErrors(t, c)
		})
	}
}

func testGrafanaQueries(t *testing.T, c tsdbClient) {
	// Grafana's backend, version 2.3: start and end in seconds, one sub-query, tags mode, its
	// default downsampling; dps an object of seconds.
	body := fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","downsample":"1m-avg","tags":{"entity":"device-001"}}]}`, sec0, sec1)
	res := c.query("/api/query", body)
	if len(res) != 1 || res[0].Metric != "devices.minute.count" || tagsOf(res) != "{entity=device-001}" || len(res[0].points) != 60 {
		t.Fatalf("backend 2.3: %s with %d points", tagsOf(res), len(res[0].points))
	}
	for i := range int64(60) {
		if v := res[0].at(t, sec0+60*i); v != float64(i+1) {
			t.Fatalf("window %d: count %v, want %d", i, v, i+1)
		}
	}
	if !sort.SliceIsSorted(res[0].ordered, func(i, j int) bool { return res[0].ordered[i] < res[0].ordered[j] }) {
		t.Fatal("dps not in time order")
	}
	// The same through GET with m= (OpenTSDB's query string), and with a trailing slash.
	get := c.query(fmt.Sprintf("/api/query/?start=%d&end=%d&m=%s", sec0, sec1, url.QueryEscape("sum:1m-avg:devices.minute.count{entity=device-001}")), "")
	if tagsOf(get) != tagsOf(res) || string(get[0].DPS) != string(res[0].DPS) {
		t.Fatalf("GET m=: %s %s", tagsOf(get), get[0].DPS)
	}

	// Version 2.4: ?arrays=true, dps as [[t, v], ...]; filters mode with group by on a wildcard,
	// average aggregator, Grafana's auto interval and a fill policy.
	res = c.query("/api/query?arrays=true", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"avg","downsample":"10m-sum-zero","filters":[{"type":"wildcard","tagk":"entity","filter":"device-*","groupBy":true}]}]}`, sec0, sec1))
	if tagsOf(res) != "{entity=device-001} {entity=device-002}" {
		t.Fatalf("wildcard group by: %s", tagsOf(res))
	}
	// 10-minute sums of 1..60: bucket k holds 10k+1..10k+10; the bucket at the end is filled.
	if v := res[0].at(t, sec0+600); v != 155 || len(res[0].points) != 7 || res[0].at(t, sec1) != 0 {
		t.Fatalf("10m-sum-zero of device-001: %v (%d points)", res[0].points, len(res[0].points))
	}

	// Across entities: a filter without group by sums every device at each window start.
	res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","filters":[{"type":"regexp","tagk":"entity","filter":"^device-00[12]$","groupBy":false}]}]}`, sec0, sec1))
	if len(res) != 1 || len(res[0].Tags) != 0 || strings.Join(res[0].AggregateTags, ",") != "entity" || res[0].at(t, sec0+60*5) != 6+105 {
		t.Fatalf("sum across entities: %s %v", tagsOf(res), res[0].points)
	}
	for agg, want := range map[string]float64{"avg": 55.5, "min": 6, "max": 105, "count": 2, "dev": 49.5, "p50": 55.5, "ep50r3": 6, "ep50r7": 55.5, "first": 6, "last": 105, "squareSum": 36 + 105*105} {
		res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":%q,"filters":[{"type":"literal_or","tagk":"entity","filter":"device-001|device-002","groupBy":false}]}]}`, sec0, sec1, agg))
		if got := res[0].at(t, sec0+60*5); math.Abs(got-want) > 1e-9 {
			t.Fatalf("aggregator %s across device-001 and device-002 at window 5: %v, want %v", agg, got, want)
		}
	}

	// Template variables with several values arrive as a|b in tags (group by each).
	res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.mean","aggregator":"sum","tags":{"entity":"device-002|other-7"}}]}`, sec0, sec1))
	if tagsOf(res) != "{entity=device-002} {entity=other-7}" || res[1].at(t, sec0) != 100 {
		t.Fatalf("tags a|b: %s", tagsOf(res))
	}
	// Every entity, one series each: tags entity=*, and the none aggregator (no grouping at all).
	for _, q := range []string{`"aggregator":"sum","tags":{"entity":"*"}`, `"aggregator":"none"`} {
		res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count",%s}]}`, sec0, sec1, q))
		if tagsOf(res) != "{entity=device-001} {entity=device-002} {entity=other-7}" {
			t.Fatalf("%s: %s", q, tagsOf(res))
		}
	}
	// The other filter types Grafana offers.
	for f, want := range map[string]string{
		`{"type":"iliteral_or","tagk":"entity","filter":"DEVICE-002","groupBy":true}`:             "{entity=device-002}",
		`{"type":"not_literal_or","tagk":"entity","filter":"device-001","groupBy":true}`:          "{entity=device-002} {entity=other-7}",
		`{"type":"not_iliteral_or","tagk":"entity","filter":"DEVICE-001|OTHER-7","groupBy":true}`: "{entity=device-002}",
		`{"type":"iwildcard","tagk":"entity","filter":"OTHER*","groupBy":true}`:                   "{entity=other-7}",
		`{"type":"wildcard","tagk":"entity","filter":"*-00*","groupBy":true}`:                     "{entity=device-001} {entity=device-002}",
	} {
		res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","filters":[%s]}]}`, sec0, sec1, f))
		if tagsOf(res) != want {
			t.Fatalf("filter %s: %s, want %s", f, tagsOf(res), want)
		}
	}

	// Quantiles: one metric, a series per quantile, grouped by quantile even when not asked.
	res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.temp_q","aggregator":"avg","tags":{"entity":"device-001"}}]}`, sec0, sec1))
	if tagsOf(res) != "{entity=device-001,quantile=0.5} {entity=device-001,quantile=0.95}" || res[1].at(t, sec0+60*9) != 20 {
		t.Fatalf("quantiles: %s", tagsOf(res))
	}
	res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.temp_q","aggregator":"max","filters":[{"type":"literal_or","tagk":"quantile","filter":"0.95","groupBy":false}]}]}`, sec0, sec1))
	if tagsOf(res) != "{quantile=0.95}entity" || res[0].at(t, sec0) != 2000 {
		t.Fatalf("one quantile across entities: %s", tagsOf(res))
	}

	// Finals only, and only the open window, through the final pseudo tag (tags or filters).
	for q, n := range map[string]int{`"tags":{"entity":"device-001","final":"true"}`: 59, `"tags":{"entity":"device-001","final":"false"}`: 1,
		`"filters":[{"type":"literal_or","tagk":"entity","filter":"device-001","groupBy":true},{"type":"literal_or","tagk":"final","filter":"true","groupBy":false}]`: 59} {
		res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum",%s}]}`, sec0, sec1, q))
		if len(res) != 1 || len(res[0].points) != n || tagsOf(res) != "{entity=device-001}" {
			t.Fatalf("%s: %s with %d points, want %d", q, tagsOf(res), len(res[0].points), n)
		}
	}

	// Rate as Grafana sends it (counter off, dropResets because no counter max nor reset value).
	res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","rate":true,"rateOptions":{"counter":false,"dropResets":true},"tags":{"entity":"device-001"}}]}`, sec0, sec1))
	if len(res[0].points) != 59 || res[0].at(t, sec0+60) != 1.0/60 {
		t.Fatalf("rate: %d points, %v", len(res[0].points), res[0].points[sec0+60])
	}
	// explicitTags: a quantile series has a key the filters do not name, a count series has not.
	for metric, n := range map[string]int{"devices.minute.count": 1, "devices.minute.temp_q": 0} {
		res = c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":%q,"aggregator":"sum","explicitTags":true,"tags":{"entity":"device-001"}}]}`, sec0, sec1, metric))
		if len(res) != n {
			t.Fatalf("explicitTags on %s: %s", metric, tagsOf(res))
		}
	}

	// Grafana's in-browser path (versions before its backend took over, version 2.3 mode): start in
	// milliseconds and no end for "now", msResolution, globalAnnotations, showQuery, and the whole
	// query model as the sub-query; results carry the sub-query index it maps them by.
	body = fmt.Sprintf(`{"start":%d,"queries":[{"refId":"A","datasource":{"type":"opentsdb","uid":"abacus"},"metric":"devices.minute.count","aggregator":"sum","downsample":"1m-avg","downsampleAggregator":"avg","downsampleFillPolicy":"none","tags":{},"filters":[{"type":"literal_or","tagk":"entity","filter":"device-002","groupBy":true}],"alias":"$tag_entity","hide":false},{"metric":"devices.minute.mean","aggregator":"sum","tags":{"entity":"other-7"}}],"msResolution":true,"globalAnnotations":true,"showQuery":true}`, t0.Add(30*time.Minute).UnixMilli())
	res = c.query("/api/query", body)
	if len(res) != 2 || res[0].Query == nil || res[0].Query.Index != 0 || res[1].Query.Index != 1 || len(res[0].points) != 30 ||
		res[0].at(t, t0.Add(30*time.Minute).UnixMilli()) != 130 || res[1].at(t, t0.Add(59*time.Minute).UnixMilli()) != 100 {
		t.Fatalf("browser path: %s, %+v", tagsOf(res), res)
	}
	// An annotation query (aggregator sum, no downsampling, globalAnnotations): answered, with no
	// annotations, since abacus stores none.
	code, b := c.do("POST", "/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"globalAnnotations":true,"queries":[{"metric":"devices.minute.count","aggregator":"sum"}]}`, sec0, sec1))
	if code != 200 || strings.Contains(string(b), "nnotations\":[{") {
		t.Fatalf("annotation query: %d %.300s", code, b)
	}
	// Other time forms: relative, OpenTSDB's formatted dates, fractional seconds.
	for _, q := range []string{"start=1h-ago", "start=2026/11/30-10:00:00&end=2026/11/30-11:00:00", "start=2026/11/30%2010:00", "start=" + strconv.FormatInt(sec0, 10) + ".000"} {
		res = c.query("/api/query?"+q+"&m=sum:devices.minute.count%7Bentity=device-001%7D", "")
		if len(res) != 1 || len(res[0].points) != 60 {
			t.Fatalf("%s: %d points", q, len(res[0].points))
		}
	}
	// Sub-queries share reads; a metric with no windows in range answers an empty array.
	if res = c.query("/api/query", `{"start":"2020/01/01","end":"2020/01/02","queries":[{"metric":"devices.minute.count","aggregator":"sum"}]}`); len(res) != 0 {
		t.Fatalf("empty range: %s", tagsOf(res))
	}
}

func testGrafanaLookups(t *testing.T, c tsdbClient) {
	strs := func(path string) []string {
		t.Helper()
		code, b := c.do("GET", path, "")
		var out []string
		if err := json.Unmarshal(b, &out); code != 200 || err != nil {
			t.Fatalf("%s: %d %s", path, code, b)
		}
		return out
	}
	// The health check asks for metrics starting with cpu: none here, and that is a success.
	if got := strs("/api/suggest?type=metrics&q=cpu&max=1000"); len(got) != 0 {
		t.Fatalf("suggest cpu: %v", got)
	}
	if got := strings.Join(strs("/api/suggest?type=metrics&q=&max=1000"), " "); got != "devices.hour.count devices.minute.count devices.minute.mean devices.minute.temp_q" {
		t.Fatalf("suggest metrics: %s", got)
	}
	if got := strings.Join(strs("/api/suggest?type=metrics&q=devices.minute.&max=2"), " "); got != "devices.minute.count devices.minute.mean" {
		t.Fatalf("suggest metrics with max: %s", got)
	}
	if got := strings.Join(strs("/api/suggest?type=tagk&q=&max=1000"), " "); got != "entity final quantile" {
		t.Fatalf("suggest tagk: %s", got)
	}
	if got := strings.Join(strs("/api/suggest?type=tagv&q=&max=1000"), " "); got != "0.5 0.95 device-001 device-002 false other-7 true" {
		t.Fatalf("suggest tagv: %s", got)
	}
	if got := strings.Join(strs("/api/suggest?type=tagv&q=dev&max=1"), " "); got != "device-001" {
		t.Fatalf("suggest tagv dev: %s", got)
	}
	// Query editor: aggregators (Grafana sorts them) and filter types (the keys).
	if got := strs("/api/aggregators"); !sort.StringsAreSorted(got) || strings.Join(got, " ") != strings.Join(aggregatorNames(), " ") || len(got) < 20 {
		t.Fatalf("aggregators: %v", got)
	}
	_, b := c.do("GET", "/api/config/filters", "")
	var filters map[string]struct{ Examples, Description string }
	if err := json.Unmarshal(b, &filters); err != nil || len(filters) != 8 || filters["literal_or"].Description == "" {
		t.Fatalf("filters: %s", b)
	}
	_, b = c.do("GET", "/api/version", "")
	if !strings.Contains(string(b), `"version":"2.3.0"`) {
		t.Fatalf("version: %s", b)
	}
	// Template variables: tag_names(metric) looks up m=<metric>&limit=1000; tag_values(metric, entity)
	// looks up m=<metric>{entity=*} with the data source's lookup limit, 0 when unset.
	type lookup struct {
		Results []struct {
			Metric string            `json:"metric"`
			Tags   map[string]string `json:"tags"`
		} `json:"results"`
		TotalResults int `json:"totalResults"`
	}
	look := func(m string, limit int) lookup {
		t.Helper()
		code, b := c.do("GET", "/api/search/lookup?m="+url.QueryEscape(m)+"&limit="+strconv.Itoa(limit), "")
		var l lookup
		if err := json.Unmarshal(b, &l); code != 200 || err != nil {
			t.Fatalf("lookup %s: %d %s", m, code, b)
		}
		return l
	}
	values := func(l lookup, key string) string {
		var out []string
		for _, r := range l.Results {
			out = append(out, r.Tags[key])
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	if l := look("devices.minute.count", 1000); values(l, "entity") != "device-001 device-002 other-7" || l.TotalResults != 3 {
		t.Fatalf("lookup of tag keys: %+v", l)
	}
	if l := look("devices.minute.temp_q{entity=*}", 0); len(l.Results) != 6 || values(l, "quantile") != "0.5 0.5 0.5 0.95 0.95 0.95" {
		t.Fatalf("lookup of quantile series: %+v", l)
	}
	if l := look("devices.minute.count{entity=device-0*}", 1); len(l.Results) != 1 || l.TotalResults < 2 {
		t.Fatalf("lookup with a limit: %+v", l)
	}
	if l := look("devices.minute.count{entity=device-404}", 10); len(l.Results) != 0 {
		t.Fatalf("lookup of an entity with no windows: %+v", l)
	}
	// Clients that POST suggest with a JSON body (pyopentsdb does).
	code, b := c.do("POST", "/api/suggest/", `{"type":"metrics","q":"devices.h","max":25}`)
	if code != 200 || strings.TrimSpace(string(b)) != `["devices.hour.count"]` {
		t.Fatalf("POST suggest: %d %s", code, b)
	}
}

func testTSDBErrors(t *testing.T, c tsdbClient) {
	q := func(sub string) string {
		return fmt.Sprintf(`{"start":%d,"end":%d,"queries":[%s]}`, sec0, sec1, sub)
	}
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.nope","aggregator":"sum"}`), 400, "No such name for 'metrics': 'devices.minute.nope'")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"median"}`), 400, `unknown aggregator "median"`)
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","downsample":"1dc-sum"}`), 400, "calendar")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","downsample":"1m-avg-spline"}`), 400, "fill policy")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","tags":{"host":"web01"}}`), 400, "No such name for 'tagk': 'host'")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","filters":[{"type":"regexp","tagk":"entity","filter":"(","groupBy":true}]}`), 400, "regexp")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","filters":[{"type":"fuzzy","tagk":"entity","filter":"x","groupBy":true}]}`), 400, `unknown filter type "fuzzy"`)
	c.fails("POST", "/api/query", `{"queries":[{"metric":"devices.minute.count","aggregator":"sum"}]}`, 400, "parameter start: required")
	c.fails("POST", "/api/query", `{"start":"yesterday","queries":[{"metric":"devices.minute.count"}]}`, 400, "parameter start")
	c.fails("POST", "/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"queries":[]}`, sec1, sec0), 400, "is not after start")
	c.fails("POST", "/api/query", `{"start":"2y-ago","queries":[{"metric":"devices.minute.count"}]}`, 400, "longer than the limit")
	c.fails("POST", "/api/query", `{"start":"1h-ago","delete":true,"queries":[{"metric":"devices.minute.count"}]}`, 400, "delete")
	c.fails("POST", "/api/query", `{"start":"1h-ago"}`, 400, "no sub-query")
	c.fails("POST", "/api/query", `[1,2]`, 400, "not a JSON object")
	c.fails("GET", "/api/query?start=1h-ago&m=sum", "", 400, "parameter m=sum")
	c.fails("GET", "/api/query?start=1h-ago&tsuid=sum:000001", "", 400, "tsuid")
	c.fails("GET", "/api/suggest?type=hosts", "", 400, "parameter type")
	c.fails("GET", "/api/search/lookup", "", 400, "parameter m")
	c.fails("GET", "/api/search/lookup?m=nope", "", 400, "No such name for 'metrics'")
	if code, _ := c.do("DELETE", "/api/query", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE /api/query: %d", code)
	}
}
