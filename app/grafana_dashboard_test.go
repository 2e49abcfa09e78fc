package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/httpapi"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/totals"
	"github.com/goccy/go-yaml"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGrafanaDashboardOnEverySet runs every panel query of the provisioned Grafana dashboard on a
// table that holds rows of every set of the devices example, rollups included, as the aggregates
// sink stores them: each must answer series with points, tagged with the set's own key (entity,
// region, none for the fleet). Unlike TestDemo it needs no engine to total the rollups.
func TestGrafanaDashboardOnEverySet(t *testing.T) {
	ts, now := devicesQueryServer(t)
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "dashboards", "devices.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	// The tag keys each answered series has, by the set of its metric.
	wantKeys := map[string]string{"region-minute": "region", "fleet-minute": ""}
	seen := map[string]bool{}
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			metric, _ := target["metric"].(string)
			set := strings.Split(metric, ".")[1]
			seen[set] = true
			// A panel's range must hold a window that has ended whatever the time of day: its last
			// ended window starts up to two steps back from now (an hourly panel over the
			// dashboard's one hour was empty in the first minute after each hour).
			info, ok := topo.Set(set)
			if !ok {
				t.Fatalf("panel %q: metric %s names no set of the topology", p.Title, metric)
			}
			if step := time.Duration(info.Window.Advance()) * time.Millisecond; p.span(t, time.Hour) < 2*step {
				t.Fatalf("panel %q: its range, %s, can hold no ended window of %s (one every %s): give it a timeFrom of at least %s",
					p.Title, p.span(t, time.Hour), set, step, 2*step)
			}
			body := grafanaQuery(t, target, "$device", "device-001|device-002", now.Add(-p.span(t, time.Hour)), now)
			resp, err := http.Post(ts.URL+"/api/query", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var res []struct {
				Tags map[string]string   `json:"tags"`
				DPS  map[string]*float64 `json:"dps"`
			}
			err = json.NewDecoder(resp.Body).Decode(&res)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil || len(res) == 0 || len(res[0].DPS) == 0 {
				t.Fatalf("panel %q query %s: %d, %d series, %v\n%s", p.Title, target["refId"], resp.StatusCode, len(res), err, body)
			}
			want, rollup := wantKeys[set]
			for _, s := range res {
				var keys []string
				for k := range s.Tags {
					if k != "quantile" {
						keys = append(keys, k)
					}
				}
				sort.Strings(keys)
				if got := strings.Join(keys, ","); rollup && got != want {
					t.Fatalf("panel %q: a series of %s has the tag keys %q, want %q", p.Title, metric, got, want)
				}
			}
			if set == "region-minute" && len(res) != 2 {
				t.Fatalf("panel %q: %d series, want one per region", p.Title, len(res))
			}
		}
	}
	if !seen["region-minute"] || !seen["fleet-minute"] {
		t.Fatalf("the dashboard has no panel of the region or fleet rollup: %v", seen)
	}
}

// devicesQueryServer is a query server, in-process, over an in-memory cell store that holds 30
// minutes of final windows of every set of the devices example (two devices, their regions, the
// fleet), encoded as the aggregates sink encodes them; and the minute its windows end before.
func devicesQueryServer(t *testing.T) (*httptest.Server, time.Time) {
	t.Helper()
	ctx := context.Background()
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	st, err := cellstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.EnsureTable(ctx, schema.TableLayout{Name: "agg", Family: "d", SaltBuckets: 4}); err != nil {
		t.Fatal(err)
	}
	enc := &sinks.AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 4}
	var cells []store.Cell
	var sets []query.ServedSet
	now := time.Now().Truncate(time.Minute)
	devs := []string{"device-001", "device-002"}
	for _, s := range topo.Sets() {
		sets = append(sets, query.ServedSet{Name: s.Name, Window: s.Window.String(), Aggregates: s.Aggregations, Rollup: s.Rollup, Dimension: s.Dimension})
		keys := devs
		switch {
		case s.Rollup && s.Dimension == "":
			keys = []string{query.GlobalKey}
		case s.Rollup:
			keys = []string{devices.RegionOf(devs[0]), devices.RegionOf(devs[1])}
		}
		for _, key := range keys {
			for k := 30; k >= 1; k-- {
				start := now.Add(-time.Duration(k) * time.Minute)
				var values []totals.Value
				for _, a := range s.Aggregations {
					v := totals.Value{Name: a, Kind: totals.KindFloat, Float: float64(k)}
					if a == "temp_quantiles" {
						v = totals.Value{Name: a, Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{{Q: 0.5, Value: 1}, {Q: 0.95, Value: 2}, {Q: 0.99, Value: 3}}}
					}
					values = append(values, v)
				}
				rec := totals.Record{Topology: topo.Name(), Set: s.Name, Entity: key, Start: start.UnixMilli(), End: start.Add(time.Minute).UnixMilli(),
					Final: true, Revision: 1, Values: values}
				if cells, err = enc.Encode(&kgo.Record{Value: rec.Encode()}, cells); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if failed, err := st.Write(ctx, cells); err != nil || len(failed) > 0 {
		t.Fatalf("seed: %v %v", failed, err)
	}
	r, err := query.NewReader(ctx, st, "agg", "d")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httpapi.Server{Topologies: []query.Served{{Name: topo.Name(), Sets: sets, Reader: r}}}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts, now
}

// provisionedDatasource is the part of a Grafana data source provisioning entry the checks read.
type provisionedDatasource struct {
	Name string `yaml:"name"`
	UID  string `yaml:"uid"`
	Type string `yaml:"type"`
}

// TestGrafanaDashboardsResolve checks every dashboard under deploy/grafana/dashboards against
// what Grafana is provisioned with and what abacus serves: each data source reference (panels,
// targets, template variables, annotations) names a provisioned data source of its type, and each
// metric, tag key and literal tag value of a query is one the query server's /api/suggest offers,
// the in-process server over every set of the devices example. A renamed set or aggregate, or a
// panel left on a data source nobody provisions, fails here rather than as an empty panel.
func TestGrafanaDashboardsResolve(t *testing.T) {
	var sources []provisionedDatasource
	files, err := filepath.Glob(filepath.Join("..", "deploy", "grafana", "provisioning", "datasources", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no data source provisioning files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Datasources []provisionedDatasource `yaml:"datasources"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sources = append(sources, doc.Datasources...)
	}
	dashboards, err := filepath.Glob(filepath.Join("..", "deploy", "grafana", "dashboards", "*.json"))
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	ts, _ := devicesQueryServer(t)
	suggested := map[string][]string{}
	suggests := func(typ, v string) bool {
		key := typ + " " + v
		if _, ok := suggested[key]; !ok {
			resp, err := http.Get(ts.URL + "/api/suggest?" + url.Values{"type": {typ}, "q": {v}, "max": {"1000"}}.Encode())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if resp.StatusCode != 200 || err != nil {
				t.Fatalf("/api/suggest type=%s q=%s: %d %v", typ, v, resp.StatusCode, err)
			}
			suggested[key] = got
		}
		return slices.Contains(suggested[key], v)
	}
	for _, path := range dashboards {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var dash any
		if err := json.Unmarshal(raw, &dash); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := filepath.Base(path)
		refs, targets := 0, 0
		walkJSON(dash, func(key string, v any) {
			switch key {
			case "datasource":
				refs++
				if why := resolveDatasource(v, sources); why != "" {
					t.Errorf("%s: data source %v: %s", name, v, why)
				}
			case "targets":
				list, _ := v.([]any)
				for _, x := range list {
					target, _ := x.(map[string]any)
					metric, _ := target["metric"].(string)
					if metric == "" {
						t.Errorf("%s: a target without a metric: %v", name, target)
						continue
					}
					targets++
					if !suggests("metrics", metric) {
						t.Errorf("%s: metric %s: the query server does not serve it", name, metric)
					}
					tags, _ := target["tags"].(map[string]any)
					for k, val := range tags {
						checkTag(t, name, metric, k, fmt.Sprint(val), suggests)
					}
					filters, _ := target["filters"].([]any)
					for _, f := range filters {
						f, _ := f.(map[string]any)
						k, _ := f["tagk"].(string)
						val, _ := f["filter"].(string)
						if typ, _ := f["type"].(string); typ != "literal_or" && typ != "iliteral_or" {
							val = "*" // a pattern: its key is checked, not its values
						}
						checkTag(t, name, metric, k, val, suggests)
					}
				}
			case "query", "definition":
				// A template variable's tag_values(metric, key): Grafana lists the key's values.
				q, _ := v.(string)
				if m := tagValuesQuery.FindStringSubmatch(q); m != nil {
					if !suggests("metrics", m[1]) {
						t.Errorf("%s: variable query %s: metric %s is not served", name, q, m[1])
					}
					checkTag(t, name, m[1], m[2], "*", suggests)
				}
			}
		})
		if refs == 0 || targets == 0 {
			t.Errorf("%s: %d data source references and %d targets: the walk found nothing to check", name, refs, targets)
		}
	}
}

// tagValuesQuery reads a Grafana OpenTSDB template variable query tag_values(metric, key).
var tagValuesQuery = regexp.MustCompile(`^\s*tag_values\(\s*([^,\s]+)\s*,\s*([^,\s)]+)\s*\)\s*$`)

// checkTag checks that a query's tag key, and its value unless a variable or a pattern, are ones
// the query server suggests.
func checkTag(t *testing.T, dashboard, metric, key, value string, suggests func(typ, v string) bool) {
	t.Helper()
	if !suggests("tagk", key) {
		t.Errorf("%s: %s: tag key %q is none the query server has", dashboard, metric, key)
	}
	for _, v := range strings.Split(value, "|") {
		if v == "" || strings.ContainsAny(v, "$*") {
			continue
		}
		if !suggests("tagv", v) {
			t.Errorf("%s: %s: tag %s=%s: the query server has no such value", dashboard, metric, key, v)
		}
	}
}

// resolveDatasource says why a dashboard's data source reference resolves to no provisioned data
// source ("" when it does). Grafana's own built-in source (annotations, "-- Grafana --") needs no
// provisioning; a template variable (${ds}) is not used by these dashboards, so it is refused too.
func resolveDatasource(ref any, sources []provisionedDatasource) string {
	switch r := ref.(type) {
	case nil:
		return "missing: Grafana would use whichever source is the default"
	case string: // the old form: the data source's name
		for _, s := range sources {
			if s.Name == r {
				return ""
			}
		}
		return "no provisioned data source has this name"
	case map[string]any:
		uid, _ := r["uid"].(string)
		typ, _ := r["type"].(string)
		if typ == "grafana" || typ == "datasource" {
			return ""
		}
		for _, s := range sources {
			if s.UID == uid {
				if typ != "" && typ != s.Type {
					return fmt.Sprintf("provisioned as type %s, referenced as %s", s.Type, typ)
				}
				return ""
			}
		}
		return "no provisioned data source has this uid"
	}
	return "not a name or a {type, uid} reference"
}

// walkJSON calls f with every key and value of every object in v, depth first.
func walkJSON(v any, f func(key string, v any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			f(k, val)
			walkJSON(val, f)
		}
	case []any:
		for _, val := range x {
			walkJSON(val, f)
		}
	}
}
