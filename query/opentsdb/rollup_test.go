package opentsdb

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/servedtest"
)

// rollupServed is servedtest.Rollups: an entity set, a rollup by region and a global rollup.
var rollupServed = servedtest.Rollups

// TestRollupOpenTSDB: a rollup's series have its dimension as tag key, a global rollup's none, and
// every look-up Grafana makes (suggest, lookup, tag filters, group by) follows the set's key.
func TestRollupOpenTSDB(t *testing.T) {
	c := tsdbClient{t, serveTSDB(t, &API{Topologies: []query.Served{rollupServed(t)}, Now: func() time.Time { return t0.Add(time.Hour) }}).URL}
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
