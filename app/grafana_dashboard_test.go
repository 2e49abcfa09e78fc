package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/cellstore"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGrafanaDashboardOnEverySet runs every panel query of the provisioned Grafana dashboard on a
// table that holds rows of every set of the devices example, rollups included, as the aggregates
// sink stores them: each must answer series with points, tagged with the set's own key (entity,
// region, none for the fleet). Unlike TestDemo it needs no engine to total the rollups.
func TestGrafanaDashboardOnEverySet(t *testing.T) {
	ctx := context.Background()
	topo, err := devices.Topology()
	if err != nil {
		t.Fatal(err)
	}
	st, err := cellstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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
	srv := &query.Server{Topologies: []query.Served{{Name: topo.Name(), Sets: sets, Reader: r}}}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "dashboards", "devices.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string           `json:"title"`
			Targets []map[string]any `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
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
			body := grafanaQuery(t, target, "$device", "device-001|device-002", now.Add(-time.Hour), now)
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
