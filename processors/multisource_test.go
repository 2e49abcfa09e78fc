package processors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestTwoSources runs one topology over two copartitioned topics, one aggregate set on each, with
// a grace longer than the whole stream so that the order in which goka interleaves the topics
// cannot make an event late. Every window's final count must match.
func TestTwoSources(t *testing.T) {
	brokers := kfakeBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := uniqueName("two")
	clicks, views := name+"-clicks", name+"-views"
	createTopic(ctx, t, brokers, clicks, 3)
	createTopic(ctx, t, brokers, views, 3)

	b := topology.New(name)
	entity := func(r reading) string { return r.Dev }
	at := func(r reading) time.Time { return time.UnixMilli(r.TS) }
	topology.NewSource(b, clicks, topology.JSON[reading](), entity, at).
		Aggregate("clicks-1m", windows.Tumbling(time.Minute)).Grace(time.Hour).Count("n")
	topology.NewSource(b, views, topology.JSON[reading](), entity, at).
		Aggregate("views-1m", windows.Tumbling(time.Minute)).Grace(time.Hour).Count("n").Sum("sum", "v")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}

	want := map[winKey]int{}
	for _, topic := range []string{clicks, views} {
		set := "clicks-1m"
		if topic == views {
			set = "views-1m"
		}
		var ins []input
		for i := range 600 {
			r := reading{Dev: fmt.Sprintf("dev-%d", i%7), TS: baseTime + int64(i)*1000, V: 1}
			v, _ := json.Marshal(r)
			ins = append(ins, input{key: r.Dev, value: v, r: r})
			want[winKey{set, r.Dev, r.TS / 60_000 * 60_000}]++
		}
		produce(ctx, t, brokers, topic, ins)
	}
	stop := runProcessor(t, topo, processors.Config{Brokers: brokers, StoragePath: t.TempDir(),
		IdleTimeout: 2 * time.Second, TickInterval: 100 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Logger: testLogger(t)})
	defer stop()
	l := readTotals(ctx, t, brokers, topo.TotalsTopic(), func(l *totalsLog) bool {
		for k := range want {
			if len(l.finals[k]) == 0 {
				return false
			}
		}
		return true
	})
	for k, n := range want {
		r := l.finals[k][0]
		if v, _ := r.Value("n"); v.Int != int64(n) {
			t.Errorf("%v: n = %d, want %d", k, v.Int, n)
		}
		if k.set == "views-1m" {
			if v, _ := r.Value("sum"); v.Float != float64(n) {
				t.Errorf("%v: sum = %v, want %d", k, v.Float, n)
			}
		}
	}
	if len(l.finals) != len(want) {
		t.Errorf("%d final windows, want %d", len(l.finals), len(want))
	}
}
