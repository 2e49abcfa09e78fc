package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
)

// TestDemo starts `abacus demo` and waits for its API to serve non-empty aggregates, with the
// in-process broker and embedded store and, when they run, with the real Kafka and HBase.
func TestDemo(t *testing.T) {
	modes := []string{"embedded"}
	if !testing.Short() {
		modes = append(modes, "real-servers")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			args := []string{"demo", "-listen", "127.0.0.1:0", "-for", "10m"}
			if mode == "real-servers" {
				args = append(args, "-kafka", strings.Join(testenv.Kafka(t), ","), "-hbase", gate.HBaseZooKeeper(t))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pr, pw := io.Pipe()
			done := make(chan int, 1)
			go func() {
				done <- program.Run(ctx, args, pw, io.Discard)
				pw.Close()
			}()
			urlc := make(chan string, 1)
			go func() {
				re := regexp.MustCompile(`dashboard: (http://\S+)`)
				sc := bufio.NewScanner(pr)
				for sc.Scan() {
					if m := re.FindStringSubmatch(sc.Text()); m != nil {
						urlc <- m[1]
					}
				}
			}()
			var base string
			select {
			case base = <-urlc:
			case code := <-done:
				t.Fatalf("demo exited with %d before serving", code)
			case <-time.After(2 * time.Minute):
				t.Fatal("demo did not print its URL")
			}
			resp, err := http.Get(base)
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(page), "uplot") {
				t.Fatalf("dashboard at %s: %d %s %.200s", base, resp.StatusCode, resp.Header.Get("Content-Type"), page)
			}
			deadline := time.Now().Add(time.Minute)
			sawLive := false
			for {
				n, live, err := countWindows(base + "api/v1/windows?set=minute&entity=device-000,device-001,device-002&limit=5")
				sawLive = sawLive || live > 0
				if err == nil && n > 0 && sawLive {
					t.Logf("%s: %d windows with counts after %s", mode, n, time.Minute-time.Until(deadline))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no aggregates (or no live window) within a minute: %d windows, live seen %v, last error %v", n, sawLive, err)
				}
				time.Sleep(time.Second)
			}
			// A rollup's window is final once every partition has closed it: the rollups' first
			// finals follow the slowest partition through the generator's hour of history. That
			// takes 15 s on an idle machine and a minute with six busy loops beside it; on a test
			// machine running its stages side by side (load 13 on 2 cores) a partition's first
			// event came a minute late and three minutes were once not enough.
			waited := time.Now()
			deadline = waited.Add(6 * time.Minute)
			for _, q := range []string{"set=fleet-minute", "set=region-minute&entity=" + strings.Join(devices.Regions, ",")} {
				for {
					n, _, err := countWindows(base + "api/v1/windows?" + q + "&from=-1h&limit=5")
					if err == nil && n > 0 {
						t.Logf("%s: %d windows of %s after %s more", mode, n, q, time.Since(waited).Round(time.Millisecond))
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no rollup window (%s) within six minutes: %d windows, last error %v", q, n, err)
					}
					time.Sleep(time.Second)
				}
			}
			checkGrafanaDoneWhen(t, base)
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("demo exited with %d after Ctrl-C", code)
			}
		})
	}
}

// countWindows returns how many windows have a positive count, and how many of them are live
// (read from the processor's open windows).
func countWindows(url string) (n, live int, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Entities map[string][]struct {
			Live   bool           `json:"live"`
			Values map[string]any `json:"values"`
		} `json:"entities"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, 0, err
	}
	for _, ws := range body.Entities {
		for _, w := range ws {
			if c, ok := w.Values["count"].(float64); ok && c > 0 {
				n++
				if w.Live {
					live++
				}
			}
		}
	}
	return n, live, nil
}

// checkGrafanaDoneWhen is issue 14's done-when: with the demo running, a POST to /api/query in the
// shape Grafana's OpenTSDB data source sends, for devices.minute.count of one device from an hour
// ago, answers 200 with an OpenTSDB result array whose dps hold about 60 points (the demo's hour
// of history), and /api/suggest?type=metrics lists the topology's metrics.
func checkGrafanaDoneWhen(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "api/suggest?type=metrics&q=&max=1000")
	if err != nil {
		t.Fatal(err)
	}
	var metrics []string
	err = json.NewDecoder(resp.Body).Decode(&metrics)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !slices.Contains(metrics, "devices.minute.count") ||
		!slices.Contains(metrics, "devices.minute.temp_quantiles") || !slices.Contains(metrics, "devices.hour.max_humidity") {
		t.Fatalf("suggest metrics: %d %v %v", resp.StatusCode, metrics, err)
	}
	// History is produced at full speed at the start; wait until the hour has gone through.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		now := time.Now()
		body := fmt.Sprintf(`{"start":%d,"end":%d,"queries":[{"metric":"devices.minute.count","aggregator":"sum","downsample":"1m-avg","tags":{"entity":"device-001"}}]}`,
			now.Add(-time.Hour).Unix(), now.Unix())
		resp, err := http.Post(base+"api/query", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var res []struct {
			Metric string             `json:"metric"`
			Tags   map[string]string  `json:"tags"`
			DPS    map[string]float64 `json:"dps"`
		}
		err = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("POST /api/query: %d %v", resp.StatusCode, err)
		}
		n := 0
		if len(res) == 1 {
			n = len(res[0].DPS)
		}
		if n >= 58 {
			if n > 62 || res[0].Metric != "devices.minute.count" || res[0].Tags["entity"] != "device-001" {
				t.Fatalf("an hour of minute windows: %d points, %s %v", n, res[0].Metric, res[0].Tags)
			}
			t.Logf("/api/query: %d points for device-001's last hour", n)
			checkDashboard(t, base)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo's history did not reach /api/query: %d points for the last hour, want about 60", n)
		}
		time.Sleep(2 * time.Second)
	}
}

// checkDashboard runs every query of the provisioned Grafana dashboard (deploy/grafana) against the
// demo's API as Grafana's OpenTSDB data source would send it, with its device variable set to one
// device and to All, and its variable's own look-up; each must answer series with points.
func checkDashboard(t *testing.T, base string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "dashboards", "devices.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name     string `json:"name"`
				Query    string `json:"query"`
				AllValue string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	// The variable: tag_values(<metric>, <key>) is a look-up of <metric>{<key>=*}.
	if len(dash.Templating.List) != 1 {
		t.Fatalf("dashboard variables: %+v", dash.Templating.List)
	}
	v := dash.Templating.List[0]
	m := regexp.MustCompile(`^tag_values\(([^,]+),\s*(\w+)\)$`).FindStringSubmatch(v.Query)
	if m == nil {
		t.Fatalf("variable %s: query %q", v.Name, v.Query)
	}
	resp, err := http.Get(base + "api/search/lookup?m=" + url.QueryEscape(m[1]+"{"+m[2]+"=*}") + "&limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	var lookup struct {
		Results []struct {
			Tags map[string]string `json:"tags"`
		} `json:"results"`
	}
	err = json.NewDecoder(resp.Body).Decode(&lookup)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(lookup.Results) == 0 || lookup.Results[0].Tags[m[2]] == "" {
		t.Fatalf("variable %s: look-up %d %+v %v", v.Name, resp.StatusCode, lookup, err)
	}
	device := lookup.Results[0].Tags[m[2]]
	queries := 0
	for _, value := range []string{device, v.AllValue} {
		for _, p := range dash.Panels {
			for _, target := range p.Targets {
				now := time.Now()
				body := grafanaQuery(t, target, "$"+v.Name, value, now.Add(-p.span(t, time.Hour)), now)
				resp, err := http.Post(base+"api/query", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				var res []struct {
					DPS map[string]*float64 `json:"dps"`
				}
				err = json.NewDecoder(resp.Body).Decode(&res)
				resp.Body.Close()
				if resp.StatusCode != 200 || err != nil || len(res) == 0 || len(res[0].DPS) == 0 {
					t.Fatalf("panel %q query %s with %s=%s: %d, %d series, %v\n%s", p.Title, target["refId"], v.Name, value, resp.StatusCode, len(res), err, body)
				}
				queries++
			}
		}
	}
	t.Logf("dashboard: %d queries answered", queries)
}

// dashboardPanel is the part of a Grafana dashboard panel the checks read.
type dashboardPanel struct {
	Title   string           `json:"title"`
	Targets []map[string]any `json:"targets"`
	// TimeFrom is the panel's relative time override ("24h"): Grafana queries the panel over
	// that span back from now, whatever the dashboard's range.
	TimeFrom string `json:"timeFrom"`
}

// span is how far back Grafana queries the panel when the dashboard's range is def long.
func (p dashboardPanel) span(t *testing.T, def time.Duration) time.Duration {
	t.Helper()
	if p.TimeFrom == "" {
		return def
	}
	m := regexp.MustCompile(`^(?:now-)?(\d+)([smhdw])$`).FindStringSubmatch(p.TimeFrom)
	if m == nil {
		t.Fatalf("panel %q: timeFrom %q is not a relative time Grafana takes (e.g. 24h)", p.Title, p.TimeFrom)
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour}[m[2]]
	return time.Duration(n) * unit
}

// grafanaQuery builds the /api/query body that Grafana's OpenTSDB data source sends for a saved
// query: the variable interpolated (several values joined with |), downsampling unless disabled
// (its auto interval taken as 1m), start and end in seconds.
func grafanaQuery(t *testing.T, target map[string]any, variable, value string, from, to time.Time) string {
	t.Helper()
	str := func(k string) string { s, _ := target[k].(string); return s }
	sub := map[string]any{"metric": str("metric"), "aggregator": str("aggregator")}
	if off, _ := target["disableDownsampling"].(bool); !off {
		interval := str("downsampleInterval")
		if interval == "" {
			interval = "1m"
		}
		ds := interval + "-" + str("downsampleAggregator")
		if fill := str("downsampleFillPolicy"); fill != "" && fill != "none" {
			ds += "-" + fill
		}
		sub["downsample"] = ds
	}
	if tags, ok := target["tags"].(map[string]any); ok && len(tags) > 0 {
		out := map[string]any{}
		for k, v := range tags {
			out[k] = strings.ReplaceAll(v.(string), variable, value)
		}
		sub["tags"] = out
	}
	if filters, ok := target["filters"].([]any); ok && len(filters) > 0 {
		var out []map[string]any
		for _, f := range filters {
			f := f.(map[string]any)
			f["filter"] = strings.ReplaceAll(f["filter"].(string), variable, value)
			out = append(out, f)
		}
		sub["filters"] = out
	}
	b, err := json.Marshal(map[string]any{"start": from.Unix(), "end": to.Unix(), "queries": []any{sub}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
