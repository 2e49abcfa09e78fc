package processors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestRollupFinalsWithoutTicks: a finite input closed by one late-enough event per partition (a
// backfill's end), with ticks an hour apart: the rollups' finals come at once, not at the next
// tick, since partitions send their progress as soon as their partials and records are
// acknowledged (bench/processor's dense-rollup stalled until a tick before that).
func TestRollupFinalsWithoutTicks(t *testing.T) {
	t.Run("kfake", func(t *testing.T) { runRollupWithoutTicks(t, kfakeBrokers(t)) })
	t.Run("real", func(t *testing.T) { runRollupWithoutTicks(t, testenv.Kafka(t)) })
}

func runRollupWithoutTicks(t *testing.T, brokers []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := uniqueName("rollnotick")
	topic := name + "-in"
	const parts = 12
	createTopic(ctx, t, brokers, topic, parts)
	b := topology.New(name)
	src := topology.NewSource(b, topic, topology.JSON[reading](),
		func(r reading) string { return r.Dev },
		func(r reading) time.Time { return time.UnixMilli(r.TS) })
	src.Aggregate("e", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	src.Aggregate("region", windows.Tumbling(time.Minute)).Grace(0).By("region", func(r reading) string { return regionOf(r.Dev) }).Count("n")
	src.Aggregate("all", windows.Tumbling(time.Minute)).Grace(0).Global().Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var ins []input
	devs := map[int32]string{}
	const n = 40_000
	for i := range n {
		r := reading{Dev: fmt.Sprintf("dev-%04d", i%2000), TS: baseTime + int64(i)*4, V: 1} // under three minutes
		v, _ := json.Marshal(r)
		ins = append(ins, input{key: r.Dev, value: v, r: r})
		devs[partitionOf(r.Dev, parts)] = r.Dev
	}
	for _, dev := range devs { // one event per partition, past every window
		r := reading{Dev: dev, TS: baseTime + 10*60_000, V: 1}
		v, _ := json.Marshal(r)
		ins = append(ins, input{key: r.Dev, value: v, r: r})
	}
	produce(ctx, t, brokers, topic, ins)
	stop := runProcessor(t, topo, processors.Config{Brokers: brokers, StoragePath: t.TempDir(), IdleTimeout: time.Hour,
		TickInterval: 15 * time.Minute, Logger: testLogger(t)})
	defer stop()
	start := time.Now()
	l := readTotals(ctx, t, brokers, topo.TotalsTopic(), func(l *totalsLog) bool {
		n := 0
		for k := range l.finals {
			if k.set == "all" {
				n++
			}
		}
		return n == 3
	})
	total := 0.0
	for k, fs := range l.finals {
		if k.set == "all" {
			v, _ := fs[0].Value("n")
			total += float64(v.Int)
		}
	}
	if total != n {
		t.Fatalf("fleet-wide finals count %v events, want %d", total, n)
	}
	t.Logf("the three fleet-wide finals came %v after the processor started", time.Since(start))
}
