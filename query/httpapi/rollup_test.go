package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/query/internal/servedtest"
	"github.com/abacus-stream/abacus/totals"
)

// rollupServed is servedtest.Rollups: an entity set, a rollup by region and a global rollup.
var rollupServed = servedtest.Rollups

// rollupServer serves rollupServed through the HTTP API.
func rollupServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := &Server{Topologies: []query.Served{rollupServed(t)}, Now: func() time.Time { return t0.Add(time.Hour) }}
	ts := httptest.NewServer(srv.HandlerWithDashboard())
	t.Cleanup(ts.Close)
	return ts
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
		if w := read(q); w.Dimension != "" || len(w.Entities) != 1 || len(w.Entities[query.GlobalKey]) != 2 || w.Entities[query.GlobalKey][0].Values["count"] != float64(39) {
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

// rollupDashboardServer serves a rollup by region and a global rollup with 30 recent minute
// windows each (the page's default range shows them), beside an entity set.
func rollupDashboardServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, table := querytest.CellStore(t)
	now := time.Now().Truncate(time.Minute)
	var recs []totals.Record
	for k := int64(30); k >= 1; k-- {
		start := now.Add(-time.Duration(k) * time.Minute).UnixMilli()
		for set, keys := range map[string][]string{"minute": {"device-001"}, "region-minute": querytest.RollupRegions, "fleet-minute": {query.GlobalKey}} {
			for n, key := range keys {
				recs = append(recs, totals.Record{Topology: "t", Set: set, Entity: key, Start: start, End: start + minute, Final: true, Revision: 1,
					Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 100*int64(n+1) + k}}})
			}
		}
	}
	querytest.WriteTotals(t, st, table, 4, recs)
	srv := &Server{Topologies: []query.Served{{Name: "t", Reader: newReader(t, st, table), Sets: []query.ServedSet{
		{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count"}, Dimension: query.EntityDimension},
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
	if p.state != "ready" || p.errText != "" || strings.Join(p.plotted.Entities, ",") != query.GlobalKey || len(p.plotted.Series[query.GlobalKey]) != 30 {
		t.Fatalf("fleet-minute: state %q, error %q, plotted %+v", p.state, p.errText, p.plotted)
	}
	comparePlotted(t, p.plotted, points("fleet-minute", []string{query.GlobalKey}))
	if !regexp.MustCompile(`<div class="field" id="entity-field" hidden=""`).MatchString(d) || strings.Contains(d, `id="set-global" hidden`) {
		t.Fatal("fleet-minute page: the entity picker is shown, or the global rollup's note is not")
	}

	// An entity set keeps its picker as it was.
	p, d = dom(ts.URL + "/?set=minute&live=0")
	if p.state != "ready" || strings.Join(p.plotted.Entities, ",") != "device-001" || !strings.Contains(d, `id="entity-label">Entities</label>`) {
		t.Fatalf("minute: state %q, plotted %+v", p.state, p.plotted)
	}
}
