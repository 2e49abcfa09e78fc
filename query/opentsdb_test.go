package query

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/totals"
	"github.com/prometheus/client_golang/prometheus"
)

// t0 is the start of the first seeded window; the test server's clock stands an hour later.
var t0 = querytest.T0

// TestListEntitiesLimitTakesTheFirstInOrder: the buckets are walked at once, and a listing cut at
// its limit still answers the first entities in order, the same at every call; the scan bound
// holds across the buckets.
func TestListEntitiesLimitTakesTheFirstInOrder(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			var recs []totals.Record
			var want []string
			for i := range 40 {
				e := fmt.Sprintf("e-%02d", (i*17)%40) // written out of order
				want = append(want, e)
				recs = append(recs, totals.Record{Topology: "devices", Set: "minute", Entity: e,
					Start: t0.UnixMilli(), End: t0.UnixMilli() + minute, Final: true, Revision: 1,
					Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}})
			}
			querytest.WriteTotals(t, st, table, 4, recs)
			sort.Strings(want)
			cs := &querytest.CountingSource{Source: st}
			r := newReader(t, cs, table)
			for range 5 {
				list, more, err := r.listEntities(context.Background(), "minute", "", 7, 1000, nil)
				if err != nil || !more || strings.Join(list, " ") != strings.Join(want[:7], " ") {
					t.Fatalf("first 7 of 40: %v %v %v; want %v", list, more, err, want[:7])
				}
			}
			list, more, err := r.listEntities(context.Background(), "minute", "e-1", 100, 1000, nil)
			if err != nil || more || strings.Join(list, " ") != strings.Join(want[10:20], " ") {
				t.Fatalf("prefix e-1: %v %v %v", list, more, err)
			}
			cs.Reset()
			if _, _, err := r.listEntities(context.Background(), "minute", "", 100, 9, nil); err != ErrEntityScanLimit {
				t.Fatalf("scan bound 9 of 40: %v", err)
			} else if n := cs.Counts(); n.Scans > 9+4 {
				t.Fatalf("scan bound 9: %d reads", n.Scans)
			}
		})
	}
}

// tsdbServer serves the OpenTSDB API over the seeded table (seedTSDB) with the given limits, its
// clock an hour after t0.
func tsdbServer(t *testing.T, src Source, table string, limits OpenTSDBLimits) *httptest.Server {
	t.Helper()
	return serveTSDB(t, &OpenTSDB{
		Topologies: []Served{{Name: "devices", Reader: newReader(t, src, table), Sets: []ServedSet{
			{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count", "mean", "temp_q"}},
			{Name: "hour", Window: "tumbling 1h0m0s", Aggregates: []string{"count"}},
		}}},
		Now:    func() time.Time { return t0.Add(time.Hour) },
		Limits: limits,
	})
}

// tsdbMux mounts api on a mux beside a "GET /", as the HTTP server mounts it beside the dashboard:
// that pattern must neither conflict with the API's nor shadow them.
func tsdbMux(api *OpenTSDB) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /", http.NotFoundHandler())
	api.Mount(mux, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"endpoint", "code"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "latency"}, []string{"endpoint"}))
	return mux
}

// serveTSDB serves api (tsdbMux) until the test ends.
func serveTSDB(t *testing.T, api *OpenTSDB) *httptest.Server {
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
			c := tsdbClient{t, tsdbServer(t, st, table, OpenTSDBLimits{}).URL}
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

// TestOpenTSDBLimits: each bound answers 400 naming itself, before the work it bounds.
func TestOpenTSDBLimits(t *testing.T) {
	st, table := querytest.CellStore(t)
	querytest.SeedTSDB(t, st, table, 4)
	c := tsdbClient{t, tsdbServer(t, st, table, OpenTSDBLimits{MaxEntities: 2, MaxWindows: 100, MaxPoints: 150, MaxSubQueries: 2, MaxEntityScan: 2}).URL}
	q := func(subs ...string) string {
		return fmt.Sprintf(`{"start":%d,"end":%d,"queries":[%s]}`, sec0, sec1, strings.Join(subs, ","))
	}
	all := `{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"*"}}`
	two := `{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"device-001|device-002"}}`
	one := `{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"device-001"}}`
	c.fails("POST", "/api/query", q(all), 400, "examined 2 entities without finishing")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"a|b|c"}}`), 400, "more than 2 entities")
	c.fails("POST", "/api/query", q(one, one, one), 400, "3 sub-queries, more than the limit of 2")
	c.fails("POST", "/api/query", q(two), 400, "reads more than 100 windows")
	// The two entities are read at once, and both reads stop when their total passes the limit:
	// at most one row past it each, not the 120 windows the two have.
	src := &querytest.CountingSource{Source: st}
	cs := tsdbClient{t, tsdbServer(t, src, table, OpenTSDBLimits{MaxEntities: 2, MaxWindows: 100}).URL}
	cs.fails("POST", "/api/query", q(two), 400, "reads more than 100 windows")
	if n := src.Counts(); n.Rows > 102 {
		t.Fatalf("a request refused at 100 windows read %d rows", n.Rows)
	}
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","downsample":"1s-avg-zero","tags":{"entity":"device-001"}}`), 400, "more than the limit of 150 points")
	// Within the bounds: one entity, its 60 windows read once for two metrics, 120 points.
	c2 := tsdbClient{t, tsdbServer(t, st, table, OpenTSDBLimits{MaxEntities: 2, MaxWindows: 60, MaxPoints: 120}).URL}
	if res := c2.query("/api/query", q(one, `{"metric":"devices.minute.mean","aggregator":"sum","tags":{"entity":"device-001"}}`)); len(res) != 2 {
		t.Fatalf("two metrics of one entity within the limits: %s", tagsOf(res))
	}
	c2.fails("POST", "/api/query", q(one, `{"metric":"devices.minute.mean","aggregator":"sum","rate":false,"tags":{"entity":"device-001"}}`, `{"metric":"devices.minute.temp_q","aggregator":"sum","tags":{"entity":"device-001"}}`), 400, "more than 120 data points")
}

// TestTSDBReadsOnlyTheAskedAggregates: a sub-query reads the cells of its metric's aggregate and
// each window's meta cell, not every aggregate of the window, in forward scans; two metrics of
// one set share one read. The answer is the same as before: oldest first, every window.
func TestTSDBReadsOnlyTheAskedAggregates(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.SeedTSDB(t, st, table, 4)
			src := &querytest.CountingSource{Source: st}
			c := tsdbClient{t, tsdbServer(t, src, table, OpenTSDBLimits{}).URL}
			q := func(metrics ...string) []tsdbSeries {
				var subs []string
				for _, m := range metrics {
					subs = append(subs, fmt.Sprintf(`{"metric":"devices.minute.%s","aggregator":"sum","tags":{"entity":"device-002"}}`, m))
				}
				src.Reset()
				return c.query("/api/query", fmt.Sprintf(`{"start":%d,"end":%d,"msResolution":true,"queries":[%s]}`, sec0, sec1, strings.Join(subs, ",")))
			}
			res := q("count")
			if len(res) != 1 {
				t.Fatalf("one series wanted: %s", tagsOf(res))
			}
			if !slices.IsSorted(res[0].ordered) || len(res[0].ordered) != 60 {
				t.Fatalf("want 60 points oldest first, got %v", res[0].ordered)
			}
			for i := range int64(60) {
				if got := res[0].at(t, t0.Add(time.Duration(i)*time.Minute).UnixMilli()); got != float64(100+i) {
					t.Fatalf("window %d: count %v, want %d", i, got, 100+i)
				}
			}
			// 60 windows, each its count and its meta cell: not the mean and the quantiles too.
			if n := src.Counts(); n.Cells != 120 || n.Rows != 60 || n.Reversed != 0 {
				t.Fatalf("one metric: %d cells in %d rows, %d reversed scans; want 120 cells in 60 rows, forward", n.Cells, n.Rows, n.Reversed)
			}
			if res := q("count", "mean"); len(res) != 2 || src.Counts().Cells != 180 || src.Counts().Rows != 60 {
				n := src.Counts()
				t.Fatalf("two metrics: %d series, %d cells in %d rows; want 2 series from one read of 180 cells in 60 rows", len(res), n.Cells, n.Rows)
			}
		})
	}
}

// TestListEntitiesSkipsRows: listing the entities of a set reads one or two rows per entity, not
// the entities' windows, and honours its bounds.
func TestListEntitiesSkipsRows(t *testing.T) {
	for name, open := range querytest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			st, table := open(t)
			querytest.SeedTSDB(t, st, table, 4)
			cs := &querytest.CountingSource{Source: st}
			r := newReader(t, cs, table)
			ctx := context.Background()
			cs.Reset()
			list, more, err := r.listEntities(ctx, "minute", "", 10, 100, nil)
			if err != nil || more || strings.Join(list, " ") != strings.Join(querytest.TSDBEntities, " ") {
				t.Fatalf("entities of minute: %v %v %v", list, more, err)
			}
			// 3 entities x 61 rows: at most 2 reads per entity and 1 per bucket, one row each.
			if n := cs.Counts(); n.Unbounded != 0 || n.Rows > 2*3 || n.Scans > 2*3+4 {
				t.Fatalf("listing read %d rows in %d scans (%d without a limit)", n.Rows, n.Scans, n.Unbounded)
			}
			if list, _, _ := r.listEntities(ctx, "hour", "device-", 10, 100, nil); strings.Join(list, " ") != "device-001 device-002" {
				t.Fatalf("entities of hour starting with device-: %v", list)
			}
			if list, more, _ := r.listEntities(ctx, "minute", "", 1, 100, nil); len(list) != 1 || !more {
				t.Fatalf("limit 1: %v %v", list, more)
			}
			if _, _, err := r.listEntities(ctx, "minute", "", 10, 2, func(string) bool { return false }); err != ErrEntityScanLimit {
				t.Fatalf("scan bound: %v", err)
			}
			if list, _, _ := r.listEntities(ctx, "nope", "", 10, 100, nil); len(list) != 0 {
				t.Fatalf("entities of a set with no rows: %v", list)
			}
		})
	}
}

func TestTSDBTimeForms(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cet, _ := time.LoadLocation("Europe/Berlin")
	for in, want := range map[string]time.Time{
		"1h-ago":               now.Add(-time.Hour),
		"90s-ago":              now.Add(-90 * time.Second),
		"500ms-ago":            now.Add(-500 * time.Millisecond),
		"2w-ago":               now.Add(-14 * 24 * time.Hour),
		"1n-ago":               now.Add(-30 * 24 * time.Hour),
		"1y-ago":               now.Add(-365 * 24 * time.Hour),
		"now":                  now,
		"1364410924":           time.Unix(1364410924, 0),
		"1364410924250":        time.UnixMilli(1364410924250),
		"1364410924.25":        time.UnixMilli(1364410924250),
		"2026/11/30-10:00:00":  time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		"2026/11/30 10:30":     time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC),
		"2026/11/30":           time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
		"2026-11-30T10:00:00Z": time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
	} {
		got, err := tsdbTime(in, now, time.UTC)
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	if got, _ := tsdbTime("2026/11/30-10:00", now, cet); !got.Equal(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("formatted time in Europe/Berlin: %v", got)
	}
	for _, bad := range []string{"", "1h", "-1h", "yesterday", "2026/13/01", "1x-ago"} {
		if _, err := tsdbTime(bad, now, time.UTC); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDownsampleAndRate(t *testing.T) {
	for in, want := range map[string]string{
		"1m-avg": "60000 avg none", "5m-sum-zero": "300000 sum zero", "500ms-max-nan": "500 max nan",
		"0all-count": "0 count none", "2h-p95-null": "7200000 p95 null", "1d-min": "86400000 min none", "30s-": "30000 avg none",
	} {
		ds, err := parseDownsample(in)
		if err != nil || fmt.Sprintf("%d %s %s", ds.interval, ds.agg, ds.fill) != want {
			t.Errorf("%s: %+v %v, want %s", in, ds, err, want)
		}
	}
	for _, bad := range []string{"1m", "m-avg", "1m-none", "1m-avg-linear", "1x-avg", "1dc-sum", "0m-avg"} {
		if _, err := parseDownsample(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	pts := []point{{0, 1}, {1000, 2}, {5000, 4}, {9000, 8}}
	ds, _ := parseDownsample("2s-sum-null")
	got := downsample(pts, ds, 0, 10_000)
	var b strings.Builder
	for _, p := range got {
		fmt.Fprintf(&b, "%d:%v ", p.t, p.v)
	}
	if b.String() != "0:3 2000:NaN 4000:4 6000:NaN 8000:8 10000:NaN " {
		t.Fatalf("2s-sum-null: %s", b.String())
	}
	ds, _ = parseDownsample("0all-max")
	if got := downsample(pts, ds, -5, 10_000); len(got) != 1 || got[0] != (point{-5, 8}) {
		t.Fatalf("0all-max: %v", got)
	}
	// Counter rate: a reset rolls over at counterMax, or is dropped.
	ctr := []point{{0, 10}, {1000, 30}, {2000, 5}}
	max100 := 100.0
	if got := rate(ctr, rateOptions{Counter: true, CounterMax: &max100}); len(got) != 2 || got[0].v != 20 || got[1].v != 75 {
		t.Fatalf("counter rate: %v", got)
	}
	if got := rate(ctr, rateOptions{Counter: true, DropResets: true}); len(got) != 1 {
		t.Fatalf("counter rate dropping resets: %v", got)
	}
	reset := 50.0
	if got := rate(ctr, rateOptions{Counter: true, CounterMax: &max100, ResetValue: &reset}); got[1].v != 0 {
		t.Fatalf("counter rate past the reset value: %v", got)
	}
	// Percentile estimates on 1..10 and on 15, 20, 35, 40, 50.
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	five := []float64{15, 20, 35, 40, 50}
	for _, c := range []struct {
		v        []float64
		q        float64
		estimate int
		want     float64
	}{{ten, 0.5, 0, 5.5}, {ten, 0.9, 0, 9.9}, {ten, 0.99, 0, 10}, {ten, 0.5, 7, 5.5}, {ten, 0.9, 7, 9.1}, {ten, 0.5, 3, 5},
		{five, 0.4, 3, 20}, {five, 0.5, 3, 20}, {five, 0.3, 3, 20}, {five, 0.4, 7, 29}, {five, 0.4, 0, 26}} {
		if got := percentile(c.v, c.q, c.estimate); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("percentile %v of %v (estimate %d): %v, want %v", c.q, c.v, c.estimate, got, c.want)
		}
	}
}

func TestParseM(t *testing.T) {
	for in, want := range map[string]string{
		"sum:devices.minute.count":                                                      "sum devices.minute.count  false []",
		"avg:1m-avg:devices.minute.count{entity=*}":                                     "avg devices.minute.count 1m-avg false [wildcard(entity=*,true)]",
		"sum:rate{counter,100,5}:explicit_tags:m{entity=a|b}{quantile=regexp(0\\.9.*)}": "sum m  true [literal_or(entity=a|b,true) regexp(quantile=0\\.9.*,false)]",
		"max:5m-max-zero:rate:m{entity=wildcard(dev*),final=true}":                      "max m 5m-max-zero true [wildcard(entity=dev*,true) literal_or(final=true,true)]",
		"sum:m{}{entity=regexp(d{1,3})}":                                                "sum m  false [regexp(entity=d{1,3},false)]",
	} {
		s, err := parseM(in, 0)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		var fs []string
		for _, f := range s.filters {
			fs = append(fs, fmt.Sprintf("%s(%s=%s,%v)", f.Type, f.Tagk, f.Filter, f.GroupBy))
		}
		if got := fmt.Sprintf("%s %s %s %v [%s]", s.aggregator, s.metric, s.dsText, s.rate, strings.Join(fs, " ")); got != want {
			t.Errorf("%s:\n got %s\nwant %s", in, got, want)
		}
	}
	s, _ := parseM("sum:rate{counter,100,5}:explicit_tags:m", 0)
	if !s.rateOptions.Counter || *s.rateOptions.CounterMax != 100 || *s.rateOptions.ResetValue != 5 || !s.explicitTags {
		t.Errorf("rate options: %+v", s)
	}
	for _, bad := range []string{"sum", "sum:", "sum:m{entity}", "sum:m{entity=a", "sum:m{a=b}{c=d}{e=f}", "sum:1m-foo:m"} {
		if _, err := parseM(bad, 0); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
