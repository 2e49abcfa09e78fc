package processors_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestEarlyFirings checks EarlyEvery: running totals come at most every D of (processor) wall
// clock, each is consistent (count = revision, revisions increase), and the final total follows.
// The wall clock is fake: it advances one second each time the processor reads it, so the test
// does not depend on timing.
func TestEarlyFirings(t *testing.T) {
	brokers := kfakeBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := uniqueName("early")
	inTopic := name + "-in"
	createTopic(ctx, t, brokers, inTopic, 1)

	b := topology.New(name)
	topology.NewSource(b, inTopic, topology.JSON[reading](),
		func(r reading) string { return r.Dev },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).
		Aggregate("hourly", windows.Tumbling(time.Hour)).Grace(0).Emit(topology.EarlyEvery(10*time.Second)).
		Count("n").Sum("sum", "v")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}

	const n = 100
	var ins []input
	for i := range n {
		r := reading{Dev: "d", TS: baseTime + int64(i)*1000, V: 1}
		v, _ := json.Marshal(r)
		ins = append(ins, input{key: r.Dev, value: v, r: r})
	}
	// An event two hours later closes the first window.
	last := reading{Dev: "d", TS: baseTime + 2*3600_000, V: 1}
	v, _ := json.Marshal(last)
	ins = append(ins, input{key: "d", value: v, r: last})
	produce(ctx, t, brokers, inTopic, ins)

	var clock atomic.Int64
	start := time.Now().UnixMilli()
	clock.Store(start)
	stop := runProcessor(t, topo, processors.Config{Brokers: brokers, StoragePath: t.TempDir(),
		IdleTimeout: 2 * time.Hour, TickInterval: time.Hour, Registerer: prometheus.NewRegistry(), Logger: testLogger(t),
		Now: func() time.Time { return time.UnixMilli(clock.Add(1000)) }})
	defer stop()

	first := winKey{"hourly", "d", baseTime / 3600_000 * 3600_000}
	l := readTotals(ctx, t, brokers, topo.TotalsTopic(), func(l *totalsLog) bool { return len(l.finals[first]) > 0 })
	final := l.finals[first][0]
	if v, _ := final.Value("n"); v.Int != n || final.Revision != n {
		t.Fatalf("final total n=%d revision %d, want %d", v.Int, final.Revision, n)
	}
	// Replay the log in order to see the early records of the first window.
	l = readTotals(ctx, t, brokers, topo.TotalsTopic(), func(l *totalsLog) bool { return len(l.finals[first]) > 0 })
	early := 0
	var prev uint64
	for _, r := range l.ordered {
		if r.Final || r.Start != first.start {
			continue
		}
		early++
		nv, _ := r.Value("n")
		sv, _ := r.Value("sum")
		if uint64(nv.Int) != r.Revision || sv.Float != float64(nv.Int) {
			t.Errorf("early total n=%d sum=%v revision %d: not a running total", nv.Int, sv.Float, r.Revision)
		}
		if r.Revision <= prev {
			t.Errorf("early revision %d after %d", r.Revision, prev)
		}
		prev = r.Revision
	}
	// Firings at most every 10s of the processor's clock allow at most elapsed/10s + 1 of them;
	// without rate limiting there would be one per event.
	elapsed := time.Duration(clock.Load()-start) * time.Millisecond
	limit := int(elapsed/(10*time.Second)) + 1
	if early < 2 || early > limit || early >= n {
		t.Errorf("%d early totals for %d events over %v of clock, want between 2 and %d", early, n, elapsed, limit)
	}
	t.Logf("%d early totals, then the final one", early)
}
