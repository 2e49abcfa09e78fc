package sinks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/internal/testenv"
)

// TestClusterSinksBrokerKills runs the end-to-end workload of both sinks on the three-broker
// cluster (events, totals and dead-letter topics at replication 3 and min.insync.replicas 2)
// into the real HBase, while the broker that leads a partition of each topic and coordinates
// both sinks' groups is SIGKILLed mid-stream and started again, twice (two different brokers).
// The sinks keep running through both outages, and then every cell is in HBase with its final
// value and one version, and every bad record is in the dead-letter topic.
func TestClusterSinksBrokerKills(t *testing.T) {
	c := testenv.KafkaCluster(t)
	e := newE2EOn(t, c.Brokers, 3)
	e.MaxBatch = 100
	recs, good, finals := e.workload(16, 300)
	hc := testenv.HBaseClient(t)

	for _, topic := range []string{e.Events, e.Totals, e.DeadLetter} {
		for p := range int32(4) {
			c.WaitPartition(t, topic, p, "3 replicas in sync", 30*time.Second,
				func(leader int32, isr []int32) bool { return leader > 0 && len(isr) == 3 })
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, topic := range []string{e.Events, e.Totals, e.DeadLetter} {
		if got := testenv.TopicConfig(ctx, t, c.Admin(), topic, "min.insync.replicas"); got != "2" {
			t.Fatalf("%s: min.insync.replicas %q, want 2", topic, got)
		}
	}

	// Both sinks run from start to end, in this process.
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	errs := map[string]chan error{}
	for _, kind := range []string{"facts", "aggregates"} {
		s, hbc, err := e.sink(runCtx, kind, func(cfg *Config) { cfg.Logger = testLogger(t) })
		if err != nil {
			t.Fatal(err)
		}
		defer hbc.Close()
		errs[kind] = make(chan error, 1)
		go func() { errs[kind] <- s.Run(runCtx) }()
	}
	alive := func(when string) {
		t.Helper()
		for kind, ch := range errs {
			select {
			case err := <-ch:
				t.Fatalf("the %s sink stopped %s: %v", kind, when, err)
			default:
			}
		}
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// produce sends a fifth of the records, spread over d, in the background; produceDone is
	// closed once they are all acknowledged.
	var produceDone <-chan error
	chunk := 0
	produce := func(d time.Duration) <-chan error {
		part := recs[chunk*len(recs)/5 : (chunk+1)*len(recs)/5]
		chunk++
		done := make(chan error, 1)
		go func() {
			const batch = 50
			pause := d / time.Duration(max(1, len(part)/batch))
			for len(part) > 0 {
				k := min(batch, len(part))
				if err := prod.ProduceSync(ctx, part[:k]...).FirstErr(); err != nil {
					done <- err
					return
				}
				part = part[k:]
				time.Sleep(pause)
			}
			close(done)
		}()
		return done
	}
	drained := func(what string) {
		t.Helper()
		if err := <-produceDone; err != nil {
			t.Fatalf("produce %s: %v", what, err)
		}
		waitFor(t, what, 3*time.Minute, func() bool {
			alive(what)
			return e.lag(t, e.FactsGroup, e.Events) == 0 && e.lag(t, e.AggGroup, e.Totals) == 0
		})
	}
	produceDone = produce(0)
	drained("the first fifth")

	kill := func(victim int32) {
		t.Helper()
		for _, topic := range []string{e.Events, e.Totals, e.DeadLetter} {
			c.MakeLeader(t, topic, 0, victim)
		}
		c.MakeCoordinator(t, e.FactsGroup, victim)
		c.MakeCoordinator(t, e.AggGroup, victim)
		produceDone = produce(15 * time.Second)
		killed := time.Now()
		c.KillBroker(t, victim)
		drained(fmt.Sprintf("records produced while broker %d is down", victim))
		t.Logf("broker %d down: both sinks committed every record produced meanwhile %v after the kill", victim, time.Since(killed).Round(time.Millisecond))
		produceDone = produce(10 * time.Second)
		c.StartBroker(t, victim)
		for _, topic := range []string{e.Events, e.Totals, e.DeadLetter} {
			c.WaitInSync(t, topic, []int32{0, 1, 2, 3}, victim, 2*time.Minute)
		}
		drained(fmt.Sprintf("records produced while broker %d came back", victim))
		t.Logf("broker %d back in every ISR, both sinks drained, %v after the kill", victim, time.Since(killed).Round(time.Millisecond))
	}
	first := c.Leader(t, e.Events, 0)
	if first < 1 {
		first = 1
	}
	kill(first)
	kill(first%3 + 1)

	stop()
	for kind, ch := range errs {
		if err := <-ch; err != nil {
			t.Fatalf("%s sink: %v", kind, err)
		}
	}
	checkTables(t, e, hc, good, finals)
	bad := 16 * (300 / 50)
	n, err := kafkaread.EndSum(ctx, c.Admin(), e.DeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	dead := consumeAll(t, e.Brokers, e.DeadLetter, int(n))
	sources := map[string]bool{}
	for _, r := range dead {
		sources[string(header(r, deadletter.HeaderSource))] = true
	}
	if len(sources) != bad+1 {
		t.Fatalf("dead letters of %d distinct records (%d in all), want %d", len(sources), len(dead), bad+1)
	}
	t.Logf("%d records: %d fact cells and %d aggregate cells with one version each, %d dead letters (%d records)",
		len(recs), good, len(finals)*3, len(sources), len(dead))
}
