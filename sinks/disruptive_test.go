package sinks

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDisruptiveHBaseDownPausesAndDrains stops HBase for 30 s while the facts sink runs and events
// keep arriving: the sink must hold its poll, stay in its group (no partition revoked or
// lost), commit nothing it has not written, and drain the lag once HBase is back, losing nothing.
func TestDisruptiveHBaseDownPausesAndDrains(t *testing.T) {
	gate.Disruptive(t)
	e := newE2E(t)
	e.MaxBatch = 200
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "facts")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, c, err := e.sink(ctx, "facts", func(cfg *Config) {
		cfg.Metrics = m
		cfg.Logger = testLogger(t)
		cfg.MaxRetryBackoff = 2 * time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()

	// A steady trickle of events for the whole test.
	prod, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...), kgo.DefaultProduceTopic(e.Events))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var produced atomic.Int64
	stopProducing := make(chan struct{})
	producerDone := make(chan struct{})
	base := time.Now().Add(-time.Hour).UnixMilli()
	go func() {
		defer close(producerDone)
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			case <-time.After(5 * time.Millisecond):
			}
			dev := fmt.Sprintf("dev-%d", i%20)
			v, _ := json.Marshal(event{Device: dev, TS: base + int64(i), Temp: 1})
			if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(dev), Value: v}).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			produced.Add(1)
		}
	}()

	waitFor(t, "first cells written", 60*time.Second, func() bool { return testutil.ToFloat64(m.commits) > 0 })
	gate.StopService(t, "hbase")
	stopped := time.Now()
	waitFor(t, "the poll to be held", 60*time.Second, func() bool { return testutil.ToFloat64(m.held) > 0 })
	committedAtPause := testutil.ToFloat64(m.commits)
	time.Sleep(30*time.Second - time.Since(stopped))
	if got := testutil.ToFloat64(m.commits); got != committedAtPause {
		t.Fatalf("commits went on while HBase was down: %v -> %v", committedAtPause, got)
	}
	gate.StartService(t, "hbase")
	time.Sleep(2 * time.Second)
	close(stopProducing)
	<-producerDone
	waitFor(t, "lag to drain after HBase returned", 3*time.Minute, func() bool { return e.lag(t, e.FactsGroup, e.Events) == 0 })
	waitFor(t, "the poll to be released", 30*time.Second, func() bool { return testutil.ToFloat64(m.held) == 0 })
	for _, kind := range []string{"revoked", "lost"} {
		if n := testutil.ToFloat64(m.rebalances.WithLabelValues(kind)); n != 0 {
			t.Fatalf("%v partitions %s during the outage: the sink left its group", n, kind)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(m.dead.WithLabelValues("write")); n != 0 {
		for _, r := range consumeAll(t, e.Brokers, e.DeadLetter, int(n)) {
			t.Errorf("dead-lettered during the outage: %s: %s", header(r, deadletter.HeaderSource), header(r, deadletter.HeaderDetail))
		}
		t.Fatalf("%v records dead-lettered while HBase was down: an outage is not a permanent failure", n)
	}
	cells := tableCells(t, testenv.HBaseClient(t), e.FactsTable)
	if int64(len(cells)) != produced.Load() {
		t.Fatalf("facts table has %d cells, %d events were produced", len(cells), produced.Load())
	}
	for k, vs := range cells {
		if len(vs) != 1 {
			t.Fatalf("cell %s has %d versions", k, len(vs))
		}
	}
	t.Logf("%d events, %v failed actions while down", produced.Load(), testutil.ToFloat64(m.failed.WithLabelValues("unavailable")))
}
