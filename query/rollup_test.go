package query

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

// rollupServed is an entity set (Dimension left empty, as callers that predate rollups do), a
// rollup by region and a global rollup over a seeded table (seedRollups).
func rollupServed(t *testing.T) Served {
	t.Helper()
	st, table := querytest.CellStore(t)
	querytest.SeedRollups(t, st, table)
	return Served{Name: "devices", Reader: newReader(t, st, table), Sets: []ServedSet{
		{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}},
		{Name: "region-minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}, Rollup: true, Dimension: "region"},
		{Name: "fleet-minute", Window: "tumbling 1m0s", Aggregates: []string{"count", "temp_q"}, Rollup: true},
	}}
}

// rollupServer serves rollupServed through the HTTP API.
func rollupServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := &Server{Topologies: []Served{rollupServed(t)}, Now: func() time.Time { return t0.Add(time.Hour) }}
	ts := httptest.NewServer(srv.HandlerWithDashboard())
	t.Cleanup(ts.Close)
	return ts
}

// The query package keeps its own copies of the topology's names for entity sets and the global
// key (it needs no topology code); they must not drift apart, or global rollups would be read
// under a key nothing writes.
func TestRollupNamesMatchTopology(t *testing.T) {
	if GlobalKey != topology.GlobalKey || EntityDimension != topology.EntityDimension {
		t.Fatalf("query has GlobalKey %q and EntityDimension %q, topology %q and %q", GlobalKey, EntityDimension, topology.GlobalKey, topology.EntityDimension)
	}
}

// TestRollupHTTPAPI: /api/v1/topologies says which sets are rollups and by what; a rollup's
// windows are read by key, as entity or under its dimension's name; a global rollup needs no key.
func TestRollupHTTPAPI(t *testing.T) {
	ts := rollupServer(t)
	get := func(path string, want int) []byte {
		t.Helper()
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&b); err != nil || resp.StatusCode != want {
			t.Fatalf("GET %s: %d %v %s, want %d", path, resp.StatusCode, err, b, want)
		}
		return b
	}

	var topos struct {
		Topologies []struct {
			Sets []struct {
				Name      string  `json:"name"`
				Rollup    bool    `json:"rollup"`
				Dimension *string `json:"dimension"`
			} `json:"sets"`
		} `json:"topologies"`
	}
	if err := json.Unmarshal(get("/api/v1/topologies", 200), &topos); err != nil || len(topos.Topologies) != 1 {
		t.Fatalf("topologies: %v %+v", err, topos)
	}
	var described []string
	for _, s := range topos.Topologies[0].Sets {
		if s.Dimension == nil {
			t.Fatalf("set %s: no dimension field", s.Name)
		}
		described = append(described, fmt.Sprintf("%s:%v:%q", s.Name, s.Rollup, *s.Dimension))
	}
	if got, want := strings.Join(described, " "), `minute:false:"entity" region-minute:true:"region" fleet-minute:true:""`; got != want {
		t.Fatalf("sets described as %s, want %s", got, want)
	}

	type windows struct {
		Dimension string `json:"dimension"`
		Entities  map[string][]struct {
			Start  int64          `json:"start"`
			Values map[string]any `json:"values"`
		} `json:"entities"`
	}
	read := func(q string) windows {
		t.Helper()
		var w windows
		if err := json.Unmarshal(get("/api/v1/windows?"+q, 200), &w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	// A rollup's keys as entity, or under its dimension's name: the same answer.
	byEntity := read("set=region-minute&entity=eu-west&limit=3")
	byRegion := read("set=region-minute&region=eu-west,us-east&limit=3")
	if byEntity.Dimension != "region" || len(byEntity.Entities["eu-west"]) != 3 || byEntity.Entities["eu-west"][0].Values["count"] != float64(19) {
		t.Fatalf("region-minute by entity=eu-west: %+v", byEntity)
	}
	if len(byRegion.Entities) != 2 || fmt.Sprint(byRegion.Entities["eu-west"]) != fmt.Sprint(byEntity.Entities["eu-west"]) ||
		byRegion.Entities["us-east"][0].Values["count"] != float64(29) {
		t.Fatalf("region-minute by region=: %+v", byRegion)
	}
	// A global rollup: no key needed, its one key read; "all" may be named, nothing else.
	for _, q := range []string{"set=fleet-minute&limit=2", "set=fleet-minute&entity=all&limit=2"} {
		if w := read(q); w.Dimension != "" || len(w.Entities) != 1 || len(w.Entities[GlobalKey]) != 2 || w.Entities[GlobalKey][0].Values["count"] != float64(39) {
			t.Fatalf("%s: %+v", q, w)
		}
	}
	// An entity set answers as before, and says so.
	if w := read("set=minute&entity=device-001&limit=1"); w.Dimension != "entity" || len(w.Entities["device-001"]) != 1 {
		t.Fatalf("entity set: %+v", w)
	}
	refused := func(q, param, want string) {
		t.Helper()
		var e apiError
		if err := json.Unmarshal(get("/api/v1/windows?"+q, 400), &e); err != nil || e.Parameter != param || !strings.Contains(e.Error, want) {
			t.Fatalf("%s: %+v, want parameter %s and %q", q, e, param, want)
		}
	}
	refused("set=fleet-minute&entity=eu-west", "entity", `its one key is "all"`)
	refused("set=region-minute", "entity", "the region keys of rollup")
	refused("set=region-minute&entity=eu-west&region=us-east", "region", "not both")
	refused("set=minute&region=eu-west", "entity", "required") // an entity set takes no dimension parameter

	// The entity listing of a rollup lists its keys and names them.
	var list struct {
		Entities  []string `json:"entities"`
		Dimension string   `json:"dimension"`
	}
	if err := json.Unmarshal(get("/api/v1/entities?set=region-minute", 200), &list); err != nil ||
		strings.Join(list.Entities, " ") != strings.Join(querytest.RollupRegions, " ") || list.Dimension != "region" {
		t.Fatalf("entities of region-minute: %+v %v", list, err)
	}
}

// TestRollupOpenTSDB: a rollup's series have its dimension as tag key, a global rollup's none, and
// every look-up Grafana makes (suggest, lookup, tag filters, group by) follows the set's key.
func TestRollupOpenTSDB(t *testing.T) {
	c := tsdbClient{t, serveTSDB(t, &OpenTSDB{Topologies: []Served{rollupServed(t)}, Now: func() time.Time { return t0.Add(time.Hour) }}).URL}
	end := t0.Add(10 * time.Minute).Unix()
	q := func(sub string) string { return fmt.Sprintf(`{"start":%d,"end":%d,"queries":[%s]}`, sec0, end, sub) }

	// Grouped by region: a series per region, tagged region=.
	res := c.query("/api/query", q(`{"metric":"devices.region-minute.count","aggregator":"sum","tags":{"region":"*"}}`))
	if tagsOf(res) != "{region=eu-west} {region=us-east}" || res[0].at(t, sec0) != 10 || res[1].at(t, sec0+60*9) != 29 {
		t.Fatalf("region=*: %s", tagsOf(res))
	}
	// Filters on region, with and without group by.
	res = c.query("/api/query", q(`{"metric":"devices.region-minute.count","aggregator":"sum","filters":[{"type":"wildcard","tagk":"region","filter":"eu-*","groupBy":true}]}`))
	if tagsOf(res) != "{region=eu-west}" || len(res[0].points) != 10 {
		t.Fatalf("wildcard on region: %s", tagsOf(res))
	}
	res = c.query("/api/query", q(`{"metric":"devices.region-minute.count","aggregator":"sum","filters":[{"type":"regexp","tagk":"region","filter":"-","groupBy":false}]}`))
	if tagsOf(res) != "{}region" || res[0].at(t, sec0+60) != 11+21 {
		t.Fatalf("sum across regions: %s %v", tagsOf(res), res)
	}
	res = c.query("/api/query?start="+fmt.Sprint(sec0)+"&end="+fmt.Sprint(end)+"&m="+url.QueryEscape("max:devices.region-minute.count{region=us-east}"), "")
	if tagsOf(res) != "{region=us-east}" || res[0].at(t, sec0+60*2) != 22 {
		t.Fatalf("m= with region: %s", tagsOf(res))
	}

	// The global rollup: one series with no tags, read without any filter; quantiles still split.
	res = c.query("/api/query", q(`{"metric":"devices.fleet-minute.count","aggregator":"sum"}`))
	if len(res) != 1 || len(res[0].Tags) != 0 || len(res[0].AggregateTags) != 0 || len(res[0].points) != 10 || res[0].at(t, sec0+60*4) != 34 {
		t.Fatalf("fleet-minute.count: %s %v", tagsOf(res), res)
	}
	res = c.query("/api/query", q(`{"metric":"devices.fleet-minute.temp_q","aggregator":"sum","tags":{"quantile":"0.99"}}`))
	if tagsOf(res) != "{quantile=0.99}" || res[0].at(t, sec0) != 60 {
		t.Fatalf("fleet-minute.temp_q at 0.99: %s", tagsOf(res))
	}
	// not_key on the region key of a rollup by region: no series has none.
	res = c.query("/api/query", q(`{"metric":"devices.region-minute.count","aggregator":"sum","filters":[{"type":"not_key","tagk":"region","filter":"","groupBy":false}]}`))
	if len(res) != 0 {
		t.Fatalf("not_key(region) on a rollup by region: %s", tagsOf(res))
	}

	// A filter on a key the metric's series cannot have is refused, saying which key they have.
	c.fails("POST", "/api/query", q(`{"metric":"devices.region-minute.count","aggregator":"sum","tags":{"entity":"eu-west"}}`), 400,
		"devices.region-minute.count is a rollup by region: its series have the tag key region (not entity)")
	c.fails("POST", "/api/query", q(`{"metric":"devices.fleet-minute.count","aggregator":"sum","tags":{"entity":"*"}}`), 400,
		"devices.fleet-minute.count is a global rollup: its one series has no tag")
	c.fails("POST", "/api/query", q(`{"metric":"devices.fleet-minute.count","aggregator":"sum","tags":{"region":"eu-west"}}`), 400, "global rollup")
	c.fails("POST", "/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","tags":{"region":"eu-west"}}`), 400,
		"devices.minute.count is an entity set's")
	c.fails("POST", "/api/query", q(`{"metric":"devices.region-minute.count","aggregator":"sum","tags":{"host":"a"}}`), 400,
		"No such name for 'tagk': 'host' (abacus series have the tag keys entity, quantile, region")
	// The entity set still reads by entity beside the rollups.
	if res = c.query("/api/query", q(`{"metric":"devices.minute.count","aggregator":"sum","tags":{"entity":"device-001"}}`)); tagsOf(res) != "{entity=device-001}" {
		t.Fatalf("entity set beside rollups: %s", tagsOf(res))
	}

	strs := func(path string) string {
		t.Helper()
		code, b := c.do("GET", path, "")
		var out []string
		if err := json.Unmarshal(b, &out); code != 200 || err != nil {
			t.Fatalf("%s: %d %s", path, code, b)
		}
		return strings.Join(out, " ")
	}
	if got := strs("/api/suggest?type=tagk&q=&max=100"); got != "entity final quantile region" {
		t.Fatalf("suggest tagk: %s", got)
	}
	// Tag values: the regions and the entity, not the global rollup's key (its series has no tag).
	if got := strs("/api/suggest?type=tagv&q=&max=100"); got != "0.5 0.99 device-001 eu-west false true us-east" {
		t.Fatalf("suggest tagv: %s", got)
	}

	type lookup struct {
		Results []struct {
			Metric string            `json:"metric"`
			Tags   map[string]string `json:"tags"`
		} `json:"results"`
		TotalResults int `json:"totalResults"`
	}
	look := func(m string) string {
		t.Helper()
		code, b := c.do("GET", "/api/search/lookup?m="+url.QueryEscape(m)+"&limit=100", "")
		var l lookup
		if err := json.Unmarshal(b, &l); code != 200 || err != nil {
			t.Fatalf("lookup %s: %d %s", m, code, b)
		}
		var out []string
		for _, r := range l.Results {
			var kv []string
			for k, v := range r.Tags {
				kv = append(kv, k+"="+v)
			}
			sort.Strings(kv)
			out = append(out, r.Metric+"{"+strings.Join(kv, ",")+"}")
		}
		return strings.Join(out, " ")
	}
	// tag_values(devices.region-minute.count, region), as Grafana's template variables ask.
	if got := look("devices.region-minute.count{region=*}"); got != "devices.region-minute.count{region=eu-west} devices.region-minute.count{region=us-east}" {
		t.Fatalf("lookup region=*: %s", got)
	}
	if got := look("devices.fleet-minute.count"); got != "devices.fleet-minute.count{}" {
		t.Fatalf("lookup of the global rollup: %s", got)
	}
	if got := look("devices.fleet-minute.temp_q"); got != "devices.fleet-minute.temp_q{quantile=0.5} devices.fleet-minute.temp_q{quantile=0.99}" {
		t.Fatalf("lookup of the global rollup's quantiles: %s", got)
	}
	// Every metric with a region: only the rollup's series.
	if got := look("*{region=eu-*}"); got != "devices.region-minute.count{region=eu-west}" {
		t.Fatalf("lookup of every metric with region=eu-*: %s", got)
	}
	c.fails("GET", "/api/search/lookup?m="+url.QueryEscape("devices.fleet-minute.count{entity=*}"), "", 400, "global rollup")
	c.fails("GET", "/api/search/lookup?m="+url.QueryEscape("*{host=*}"), "", 400, "No such name for 'tagk': 'host'")
}

// rollupDashboardServer serves a rollup by region and a global rollup with 30 recent minute
// windows each (the page's default range shows them), beside an entity set.
func rollupDashboardServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, table := querytest.CellStore(t)
	now := time.Now().Truncate(time.Minute)
	var recs []totals.Record
	for k := int64(30); k >= 1; k-- {
		start := now.Add(-time.Duration(k) * time.Minute).UnixMilli()
		for set, keys := range map[string][]string{"minute": {"device-001"}, "region-minute": querytest.RollupRegions, "fleet-minute": {GlobalKey}} {
			for n, key := range keys {
				recs = append(recs, totals.Record{Topology: "t", Set: set, Entity: key, Start: start, End: start + minute, Final: true, Revision: 1,
					Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 100*int64(n+1) + k}}})
			}
		}
	}
	querytest.WriteTotals(t, st, table, 4, recs)
	srv := &Server{Topologies: []Served{{Name: "t", Reader: newReader(t, st, table), Sets: []ServedSet{
		{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}, Dimension: EntityDimension},
		{Name: "region-minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}, Rollup: true, Dimension: "region"},
		{Name: "fleet-minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}, Rollup: true},
	}}}}
	ts := httptest.NewServer(srv.HandlerWithDashboard())
	t.Cleanup(ts.Close)
	return ts
}

// TestDashboardRollupsInChromium: the set picker names rollups with their dimension, the entity
// picker of a rollup is labelled with it and charts its keys, and a global rollup is charted with
// nothing picked, from its one key.
func TestDashboardRollupsInChromium(t *testing.T) {
	ts := rollupDashboardServer(t)
	points := func(set string, keys []string) map[string][]plottedPoint {
		t.Helper()
		q := url.Values{"topology": {"t"}, "set": {set}, "from": {"-1h"}, "limit": {"5000"}}
		if set != "fleet-minute" {
			q.Set("entity", strings.Join(keys, ","))
		}
		resp, err := http.Get(ts.URL + "/api/v1/windows?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Entities map[string][]struct {
				Start  int64                   `json:"start"`
				Final  bool                    `json:"final"`
				Values struct{ Count float64 } `json:"values"`
			} `json:"entities"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("API windows of %s: %d %v", set, resp.StatusCode, err)
		}
		out := map[string][]plottedPoint{}
		for _, k := range keys {
			ws := body.Entities[k]
			pts := []plottedPoint{}
			for i := len(ws) - 1; i >= 0; i-- {
				pts = append(pts, plottedPoint{Start: ws[i].Start, Value: ws[i].Values.Count, Final: ws[i].Final})
			}
			out[k] = pts
		}
		return out
	}
	dom := func(pageURL string) (page, string) {
		t.Helper()
		p := loadPage(t, pageURL)
		return p, string(headless(t, "--dump-dom", pageURL))
	}

	// A rollup by region: its keys charted by default, the picker called region.
	p, d := dom(ts.URL + "/?set=region-minute&live=0")
	if p.state != "ready" || p.errText != "" || strings.Join(p.plotted.Entities, ",") != strings.Join(querytest.RollupRegions, ",") {
		t.Fatalf("region-minute: state %q, error %q, plotted %+v", p.state, p.errText, p.plotted)
	}
	comparePlotted(t, p.plotted, points("region-minute", querytest.RollupRegions))
	for _, want := range []string{`<option value="region-minute">region-minute (by region)</option>`, `<option value="fleet-minute">fleet-minute (global)</option>`,
		`<option value="minute">minute</option>`, `id="entity-label">region</label>`, `id="latest-key">region</th>`} {
		if !strings.Contains(d, want) {
			t.Fatalf("region-minute page lacks %s", want)
		}
	}

	// The global rollup: nothing to pick, its one key charted.
	p, d = dom(ts.URL + "/?set=fleet-minute&live=0")
	if p.state != "ready" || p.errText != "" || strings.Join(p.plotted.Entities, ",") != GlobalKey || len(p.plotted.Series[GlobalKey]) != 30 {
		t.Fatalf("fleet-minute: state %q, error %q, plotted %+v", p.state, p.errText, p.plotted)
	}
	comparePlotted(t, p.plotted, points("fleet-minute", []string{GlobalKey}))
	if !regexp.MustCompile(`<div class="field" id="entity-field" hidden=""`).MatchString(d) || strings.Contains(d, `id="set-global" hidden`) {
		t.Fatal("fleet-minute page: the entity picker is shown, or the global rollup's note is not")
	}

	// An entity set keeps its picker as it was.
	p, d = dom(ts.URL + "/?set=minute&live=0")
	if p.state != "ready" || strings.Join(p.plotted.Entities, ",") != "device-001" || !strings.Contains(d, `id="entity-label">Entities</label>`) {
		t.Fatalf("minute: state %q, plotted %+v", p.state, p.plotted)
	}
}
