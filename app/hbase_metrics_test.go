package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
)

// TestHBaseMetricsPerServer: a process's /metrics carries the HBase client's counters per region
// server, and they follow what the client did on the real HBase: the cells it wrote, the cells
// the server refused, nothing left in flight.
func TestHBaseMetricsPerServer(t *testing.T) {
	hc := testenv.HBaseClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := fmt.Sprintf("app_hbmetrics_%d", time.Now().UnixNano())
	if err := hc.Admin().CreateTable(ctx, hbase.TableSpec{Name: table, Families: []hbase.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	testenv.DropTableAtEnd(t, hc, table)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newHBaseCollector(hc))
	sent0 := testutil.ToFloat64(sumOver(t, reg, "abacus_hbase_actions_sent_total"))

	var ms []*hbase.Mutation
	for i := range 30 {
		family := "f"
		if i%10 == 0 {
			family = "nope"
		}
		ms = append(ms, hbase.NewPut(table, []byte(fmt.Sprint(i))).Add(family, []byte("q"), 1, []byte("v")))
	}
	if err := hc.Apply(ctx, ms); err == nil {
		t.Fatal("puts to a missing family succeeded")
	}
	if got := testutil.ToFloat64(sumOver(t, reg, "abacus_hbase_actions_sent_total")) - sent0; got != 30 {
		t.Errorf("actions_sent_total rose by %v, want 30", got)
	}
	if got := testutil.ToFloat64(sumOver(t, reg, "abacus_hbase_action_errors_total")); got < 3 {
		t.Errorf("action_errors_total %v, want at least the 3 refused puts", got)
	}
	if got := testutil.ToFloat64(sumOver(t, reg, "abacus_hbase_in_flight_requests")); got != 0 {
		t.Errorf("in_flight_requests %v after the Apply returned", got)
	}
	if n, err := testutil.GatherAndCount(reg, "abacus_hbase_requests_total"); err != nil || n < 1 {
		t.Errorf("requests_total: %d series (%v), want one per region server", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

// sumOver is a gauge holding the sum of metric name over its series, as gathered from reg.
func sumOver(t *testing.T, reg *prometheus.Registry, name string) prometheus.Gauge {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum"})
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			switch {
			case m.Counter != nil:
				g.Add(m.Counter.GetValue())
			case m.Gauge != nil:
				g.Add(m.Gauge.GetValue())
			}
			if !strings.Contains(m.String(), "server") {
				t.Errorf("%s series without a server label: %v", name, m)
			}
		}
	}
	return g
}

// TestHBaseLatencyHistogram: every RPC of the client lands in the latency histogram under its
// server and method, on the real HBase.
func TestHBaseLatencyHistogram(t *testing.T) {
	h, observe := hbaseLatency()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	cfg := testenv.HBaseConfig(t)
	cfg.ObserveRPC = observe
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc, err := hbase.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	table := fmt.Sprintf("app_hblatency_%d", time.Now().UnixNano())
	if err := hc.Admin().CreateTable(ctx, hbase.TableSpec{Name: table, Families: []hbase.FamilySpec{{Name: "f"}}}); err != nil {
		t.Fatal(err)
	}
	testenv.DropTableAtEnd(t, hc, table)
	var ms []*hbase.Mutation
	for i := range 10 {
		ms = append(ms, hbase.NewPut(table, []byte(fmt.Sprint(i))).Add("f", []byte("q"), 1, []byte("v")))
	}
	if err := hc.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !strings.Contains(labels["server"], ":") {
				t.Errorf("a series without a server address: %v", labels)
			}
			methods[labels["method"]] += m.GetHistogram().GetSampleCount()
		}
	}
	if methods["Multi"] < 1 {
		t.Errorf("no Multi in the latency histogram: %v", methods)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}
