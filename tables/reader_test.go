package tables_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/tables"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// brokers are the brokers the Kafka tests run on: kfake, and the real broker.
func brokers(t *testing.T) map[string]func(t *testing.T) []string {
	return map[string]func(t *testing.T) []string{
		"kfake": func(t *testing.T) []string {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c.ListenAddrs()
		},
		"kafka": func(t *testing.T) []string { return testenv.Kafka(t) },
	}
}

// devicesTable is the plan of joinTopology's table, renamed to topic.
func devicesTable(t *testing.T, topic string, history time.Duration) *plan.Table {
	b := topology.New("reader")
	src := topology.NewSource(b, "in", topology.JSON[reading](), func(r reading) string { return r.Device },
		func(r reading) time.Time { return time.UnixMilli(r.Time) })
	tb := topology.NewTable[device](b, "devices", topic, topology.JSON[device]()).History(history)
	topology.Join(src, tb, func(r reading) string { return r.Device }, func(r reading, _ device, _ bool) (reading, error) { return r, nil })
	src.Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return plan.Of(topo).Tables[0]
}

// TestReaderKeepsVersionsTheTopicLost: a reader writes every version it reads to its group's
// versions topic; reopened after the table's topic lost its records (DeleteRecords, as
// compaction or retention would), it still answers every event time from them, and reads on
// from where it stopped. Versions older than History are pruned from the topic too.
func TestReaderKeepsVersionsTheTopicLost(t *testing.T) {
	for name, mk := range brokers(t) {
		t.Run(name, func(t *testing.T) {
			addrs := mk(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm := kadm.NewClient(cl)
			suffix := time.Now().Format("150405.000000")
			topic, group := "devices-"+suffix, "g-"+suffix
			def := devicesTable(t, topic, time.Hour)
			// The table's topic with the delete policy: Kafka deletes records (DeleteRecords) only
			// there, and compaction cannot be made to run at once. Either way the topic loses
			// versions that events may still need.
			for tp, policy := range map[string]string{topic: "delete", plan.VersionsTopic(group, def.Name): "compact"} {
				if _, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": &policy}, tp); err != nil {
					t.Fatal(err)
				}
			}
			put := func(key, region string, at time.Time) {
				t.Helper()
				var v []byte
				if region != "" {
					v, _ = json.Marshal(device{region})
				}
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: v, Timestamp: at}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			put("d1", "eu", t0)
			put("d1", "us", t0.Add(10*time.Minute))
			put("d2", "ap", t0.Add(5*time.Minute))
			put("d2", "", t0.Add(20*time.Minute))
			open := func() (*tables.Reader, *prometheus.Registry) {
				t.Helper()
				reg := prometheus.NewRegistry()
				m, err := tables.NewMetrics(reg, "reader")
				if err != nil {
					t.Fatal(err)
				}
				r, err := tables.Open(ctx, def, tables.Config{Group: group, Client: []kgo.Opt{kgo.SeedBrokers(addrs...)}, Metrics: m})
				if err != nil {
					t.Fatal(err)
				}
				return r, reg
			}
			check := func(r *tables.Reader, when string) {
				t.Helper()
				for _, c := range []struct {
					key  string
					at   time.Duration
					want string
				}{{"d1", -time.Second, "-"}, {"d1", 0, "eu"}, {"d1", 9 * time.Minute, "eu"}, {"d1", 10 * time.Minute, "us"},
					{"d2", 4 * time.Minute, "-"}, {"d2", 5 * time.Minute, "ap"}, {"d2", 19 * time.Minute, "ap"}, {"d2", 20 * time.Minute, "-"}} {
					got := "-"
					if v, ok := r.At(c.key, t0.Add(c.at).UnixMilli()); ok {
						got = v.(device).Region
					}
					if got != c.want {
						t.Errorf("%s: %s at %v = %s, want %s", when, c.key, c.at, got, c.want)
					}
				}
			}
			r, _ := open()
			check(r, "first read")
			// A sparse table answers at once: every partition read to its end.
			if !r.Wait(ctx, t0.Add(24*time.Hour).UnixMilli(), time.Now()) {
				t.Fatal("Wait for an event past every version: not ready, though the table was read to its end")
			}
			r.Close()

			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			to := kadm.Offsets{}
			ends.Each(func(o kadm.ListedOffset) {
				to.Add(kadm.Offset{Topic: topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
			})
			if res, err := adm.DeleteRecords(ctx, to); err != nil || res.Error() != nil {
				t.Fatalf("delete records: %v %v", err, res.Error())
			}
			put("d1", "sa", t0.Add(30*time.Minute))
			r, reg := open()
			check(r, "after the table's topic lost its records")
			if lag := testGauge(t, reg, "abacus_table_lag_records"); lag != 0 {
				t.Errorf("lag %v records once the table is read", lag)
			}
			if v, ok := r.At("d1", t0.Add(time.Hour).UnixMilli()); !ok || v.(device).Region != "sa" {
				t.Errorf("d1 after the new version: %v %v", v, ok)
			}
			if n := testCounter(t, reg, "abacus_table_updates_total"); n != 1 {
				t.Errorf("updates read on reopening: %v, want 1 (the versions kept are not read again)", n)
			}
			r.Close()

			// Past History, the superseded versions go, from memory and from the topic.
			def.History = time.Minute
			reg = prometheus.NewRegistry()
			m, _ := tables.NewMetrics(reg, "reader")
			r, err = tables.Open(ctx, def, tables.Config{Group: group, Client: []kgo.Opt{kgo.SeedBrokers(addrs...)}, Metrics: m, PruneEvery: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			put("d3", "eu", t0.Add(40*time.Minute)) // a fetch: the reader prunes between fetches
			for ctx.Err() == nil && testCounter(t, reg, "abacus_table_versions_pruned_total") == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			r.Close()
			r, _ = open()
			defer r.Close()
			for _, c := range []struct {
				key, want string
			}{{"d1", "sa"}, {"d2", "-"}, {"d3", "eu"}} {
				got := "-"
				if v, ok := r.At(c.key, t0.Add(time.Hour).UnixMilli()); ok {
					got = v.(device).Region
				}
				if got != c.want {
					t.Errorf("after pruning: %s = %s, want %s", c.key, got, c.want)
				}
			}
			if _, ok := r.At("d1", t0.UnixMilli()); ok {
				t.Error("d1's first version was pruned, and read back from the versions topic")
			}
		})
	}
}

func testGauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func testCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
