package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/query/internal/querytest"
	"github.com/abacus-stream/abacus/query/internal/servedtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const minute = querytest.Minute

// t0 is the start of the first window of querytest's SeedTSDB and SeedRollups.
var t0 = querytest.T0

// newReader is servedtest.Reader, the name the tests read best.
var newReader = servedtest.Reader

// fakeLive serves open windows by set/entity, as the processors' live state would.
type fakeLive map[string][]query.Window

func (f fakeLive) OpenWindows(_ context.Context, set, entity string) ([]query.Window, error) {
	return f[set+"/"+entity], nil
}

func TestHTTPAPI(t *testing.T) {
	st, table := querytest.CellStore(t)
	querytest.Seed(t, st, table, 4)
	srv := &Server{Topologies: []query.Served{{Name: "t", Sets: []query.ServedSet{{Name: "minute", Window: "tumbling 1m0s", Aggregates: []string{"count", "max", "p"}}},
		Reader: newReader(t, st, table)}}}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil && resp.StatusCode != 200 {
			t.Fatalf("%s: %d with undecodable body", path, resp.StatusCode)
		}
		return resp.StatusCode, body
	}
	code, body := get("/api/v1/windows?set=minute&entity=ab1,ab12&limit=2")
	if code != 200 {
		t.Fatalf("windows: %d %v", code, body)
	}
	ents := body["entities"].(map[string]any)
	ab12 := ents["ab12"].([]any)
	if len(ab12) != 2 || ab12[0].(map[string]any)["values"].(map[string]any)["count"].(float64) != 1009 {
		t.Fatalf("ab12 windows %v", ab12)
	}
	p := ents["ab1"].([]any)[0].(map[string]any)["values"].(map[string]any)["p"].(map[string]any)
	if p["0.99"].(float64) != 18 {
		t.Fatalf("quantiles of ab1's newest window: %v", p)
	}
	for path, param := range map[string]string{
		"/api/v1/windows?entity=ab1":                         "set",
		"/api/v1/windows?set=nope&entity=ab1":                "set",
		"/api/v1/windows?set=minute":                         "entity",
		"/api/v1/windows?set=minute&entity=a&from=yesterday": "from",
		"/api/v1/windows?set=minute&entity=a&to=1&from=2":    "to",
		"/api/v1/windows?set=minute&entity=a&limit=0":        "limit",
		"/api/v1/windows?set=minute&entity=a&order=sideways": "order",
		"/api/v1/windows?set=minute&entity=a&live=perhaps":   "live",
		"/api/v1/windows?topology=x&set=minute&entity=a":     "topology",
		"/api/v1/entities?set=minute&limit=many":             "limit",
	} {
		code, body := get(path)
		if code != 400 || body["parameter"] != param || !strings.Contains(body["error"].(string), param) {
			t.Fatalf("%s: %d %v, want 400 naming %s", path, code, body, param)
		}
	}
	code, body = get("/api/v1/entities?set=minute")
	if code != 200 || fmt.Sprint(body["entities"]) != "[ab1 ab12]" {
		t.Fatalf("entities: %d %v", code, body)
	}
	if code, _ := get("/api/v1/topologies"); code != 200 {
		t.Fatal("topologies failed")
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(path); code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 1<<16)
	n, _ := resp.Body.Read(buf)
	sb.Write(buf[:n])
	if !strings.Contains(sb.String(), "abacus_query_requests_total") {
		t.Fatalf("metrics do not count requests:\n%s", sb.String())
	}
}

// TestTwoHandlersShareMetrics: a second handler on one registry counts into the same series.
func TestTwoHandlersShareMetrics(t *testing.T) {
	st, table := querytest.CellStore(t)
	querytest.Seed(t, st, table, 4)
	reg := prometheus.NewRegistry()
	srv := &Server{Topologies: []query.Served{{Name: "t", Sets: []query.ServedSet{{Name: "minute"}}, Reader: newReader(t, st, table)}}, Registry: reg}
	for range 2 {
		ts := httptest.NewServer(srv.Handler())
		resp, err := http.Get(ts.URL + APIPrefix + "/topologies")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ts.Close()
	}
	n := testutil.ToFloat64(mustCounter(t, reg, "abacus_query_requests_total"))
	if n != 2 {
		t.Fatalf("requests counted %v, want 2 (one per handler)", n)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sum"})
			c.Add(sum)
			return c
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestWindowsSaysWhenTruncated: /api/v1/windows says which entities the limit cut and where
// their next page starts; following it walks every window once.
func TestWindowsSaysWhenTruncated(t *testing.T) {
	st, table := querytest.CellStore(t)
	querytest.Seed(t, st, table, 4)
	srv := &Server{Topologies: []query.Served{{Name: "t", Sets: []query.ServedSet{{Name: "minute", Aggregates: []string{"count"}}}, Reader: newReader(t, st, table)}},
		Now: func() time.Time { return time.UnixMilli(20 * minute) }} // the seeded windows are in 1970: from..now within max_range
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	type page struct {
		Entities  map[string][]windowJSON     `json:"entities"`
		Truncated bool                        `json:"truncated"`
		Next      map[string]map[string]int64 `json:"next"`
	}
	get := func(q string) page {
		resp, err := http.Get(ts.URL + "/api/v1/windows?set=minute&" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p page
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", q, resp.StatusCode, err)
		}
		return p
	}
	for _, order := range []string{"newest", "oldest"} {
		var seen []int64
		q := "entity=ab1&limit=4&order=" + order
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatalf("%s: paging does not end", order)
			}
			p := get(q)
			for _, w := range p.Entities["ab1"] {
				seen = append(seen, w.Start/minute)
			}
			if len(p.Entities["ab1"]) > 4 || p.Truncated != (p.Next["ab1"] != nil) {
				t.Fatalf("%s: %d windows, truncated %v, next %v", q, len(p.Entities["ab1"]), p.Truncated, p.Next)
			}
			if !p.Truncated {
				break
			}
			q = "entity=ab1&limit=4&order=" + order
			for k, v := range p.Next["ab1"] {
				q += "&" + k + "=" + strconv.FormatInt(v, 10)
			}
		}
		want := "[9 8 7 6 5 4 3 2 1 0]"
		if order == "oldest" {
			want = "[0 1 2 3 4 5 6 7 8 9]"
		}
		if fmt.Sprint(seen) != want {
			t.Fatalf("%s pages: %v", order, seen)
		}
	}
	// Exactly the limit: not truncated.
	if p := get("entity=ab1,ab12&limit=10"); p.Truncated || len(p.Entities["ab12"]) != 10 {
		t.Fatalf("limit 10 of 10 windows: truncated %v", p.Truncated)
	}
	if p := get("entity=ab1,ab12&limit=9"); !p.Truncated || len(p.Next) != 2 || p.Next["ab12"]["to"] != minute {
		t.Fatalf("limit 9 of 10 windows: %+v", p.Next)
	}
}
