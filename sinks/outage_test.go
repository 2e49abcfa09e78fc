package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/bench/chaos/stream"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store/hbasestore"
)

// outageDuration is how long TestDisruptiveHBaseDownFiveMinutes keeps HBase down: five minutes,
// or ABACUS_OUTAGE_TEST_DURATION (a Go duration) to try the test quickly by hand.
func outageDuration(t *testing.T) time.Duration {
	if v := os.Getenv("ABACUS_OUTAGE_TEST_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("ABACUS_OUTAGE_TEST_DURATION: %v", err)
		}
		return d
	}
	return 5 * time.Minute
}

// outageSample is one reading of the pipeline while HBase is down.
type outageSample struct {
	at                    time.Duration // since HBase stopped
	heap                  uint64        // live heap after a GC
	factsHeld, aggHeld    float64
	factsCommit, aggCommt float64
	totalsEnd             int64 // records in the totals topic: what the processor has emitted
	procLag               int64 // source records the processor has not committed
	produced              int64
}

// TestDisruptiveHBaseDownFiveMinutes runs the whole pipeline in process (the processor of the
// chaos topology, the aggregates sink and the facts sink) on a steady stream of 1 KB events and
// stops HBase for five minutes. While HBase is away: no sink leaves its group (no partition
// revoked or lost), nothing is committed, both sinks hold their poll (held_partitions > 0), the
// processor keeps up with the stream and keeps emitting totals, and the live heap stays within a
// fixed bound however large the backlog grows. After: the lag drains, held_partitions returns to
// 0, the commits cover the backlog, and both tables hold exactly the cells the oracle of package
// bench/chaos/stream computes from the stream, one version each.
func TestDisruptiveHBaseDownFiveMinutes(t *testing.T) {
	testenv.Disruptive(t)
	outage := outageDuration(t)
	brokers, quorum := testenv.Kafka(t), testenv.HBaseZooKeeper(t)
	const parts, rate, pad = 4, 400, 1000 // events/s of ~1.1 KB: about 26 MB of backlog a minute
	prefix := fmt.Sprintf("outage-%d-", time.Now().UnixNano())
	source := prefix + "events"
	topo, err := stream.Topology()
	if err != nil {
		t.Fatal(err)
	}
	if topo, err = topo.WithTopicNames(prefix, map[string]string{stream.SourceTopic: source}); err != nil {
		t.Fatal(err)
	}
	createTopics(t, brokers, parts, source, topo.TotalsTopic(), topo.DeadLetterTopic())
	c := testenv.HBaseClient(t)
	tbl := strings.ReplaceAll(strings.TrimSuffix(prefix, "-"), "-", "_")
	aggTable, factsTable := tbl+"_agg", tbl+"_facts"
	layout := stream.Layout{AggregatesBuckets: 8, FactsBuckets: 8, Family: "d"}
	setup, cancelSetup := context.WithTimeout(context.Background(), 2*time.Minute)
	for _, tb := range []string{aggTable, factsTable} {
		testenv.DropTableAtEnd(t, c, tb)
		if err := hbaseStore(t, c).EnsureTable(setup, schema.TableLayout{Name: tb, Family: "d", SaltBuckets: 8, Versions: 5}); err != nil {
			t.Fatal(err)
		}
	}
	cancelSetup()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := testLogger(t)
	var wg sync.WaitGroup
	runErrs := make(chan error, 3)
	// The processor, with an idle timeout longer than the test: stream time never follows the
	// wall clock, so the oracle's totals are exact.
	preg := prometheus.NewRegistry()
	proc, err := processors.New(topo, processors.Config{Brokers: brokers, Group: prefix + "processor",
		StoragePath: filepath.Join(t.TempDir(), "state"), IdleTimeout: 6 * time.Hour, Registerer: preg,
		Logger: log.With("part", "processor")})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { runErrs <- proc.Run(ctx) })
	// The sinks, each with its own HBase client, as separate deployments have.
	newSink := func(name, group string, topics []string, enc Encoder) *Metrics {
		hc, err := hbase.NewClient(setupCtx(t), hbase.Config{ZooKeeper: quorum})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hc.Close() })
		st, err := hbasestore.New(hc, hbasestore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m := NewMetrics(prometheus.NewRegistry(), name)
		s, err := NewFlushThenCommit(Config{Brokers: brokers, Group: group, Topics: topics, DeadLetterTopic: topo.DeadLetterTopic(),
			MaxBatchRecords: 2000, FlushInterval: 500 * time.Millisecond, Metrics: m, Logger: log.With("part", name)}, enc, st)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { runErrs <- s.Run(ctx) })
		return m
	}
	aggM := newSink("aggregates", prefix+"aggregates-sink", []string{topo.TotalsTopic()},
		&AggregatesEncoder{Table: aggTable, Family: "d", SaltBuckets: 8})
	factsM := newSink("facts", prefix+"facts-sink", []string{source},
		&FactsEncoder{Table: factsTable, Family: "d", SaltBuckets: 8, MaxFutureSkew: topo.MaxFutureSkew(), Extract: FactsOf(topo)})

	// A steady stream, days in the past, until told to stop.
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(source),
		kgo.RecordPartitioner(partitioner.Kgo()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var produced, producedBytes atomic.Int64
	stopProducing := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		g := &stream.Generator{Seed: 11, Entities: 200, PadBytes: pad,
			Start: time.Now().Add(-3 * 24 * time.Hour).UnixMilli(), Step: 10 * time.Millisecond}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		t0 := time.Now()
		var n int64
		var recs []stream.Record
		for {
			select {
			case <-stopProducing:
				return
			case <-tick.C:
			}
			for target := int64(time.Since(t0).Seconds() * rate); n < target; n++ {
				for _, r := range g.Next(recs[:0]) {
					producedBytes.Add(int64(len(r.Value)))
					prod.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
						if err != nil && ctx.Err() == nil {
							t.Errorf("produce: %v", err)
						}
					})
				}
			}
			produced.Store(n)
		}
	}()

	adm := kadm.NewClient(prod)
	lag := func(group, topic string) int64 {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := groupLagOf(c, adm, group, topic)
		if err != nil {
			return -1
		}
		return l
	}
	totalsEnd := func() int64 {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(c, topo.TotalsTopic())
		if err != nil {
			return -1
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	liveHeap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	waitFor(t, "both sinks to commit", 2*time.Minute, func() bool {
		return testutil.ToFloat64(factsM.commits) > 0 && testutil.ToFloat64(aggM.commits) > 0
	})
	time.Sleep(10 * time.Second) // a steady state before the outage
	testenv.StopService(t, "hbase")
	stopped := time.Now()
	restarted := false
	defer func() {
		if !restarted { // never leave the shared HBase down
			testenv.StartService(t, "hbase")
		}
	}()
	waitFor(t, "both sinks to hold their poll", 90*time.Second, func() bool {
		return testutil.ToFloat64(factsM.held) > 0 && testutil.ToFloat64(aggM.held) > 0
	})
	t.Logf("both sinks hold their poll %v after HBase stopped", time.Since(stopped).Round(time.Second))
	var samples []outageSample
	sample := func() outageSample {
		s := outageSample{at: time.Since(stopped), heap: liveHeap(),
			factsHeld: testutil.ToFloat64(factsM.held), aggHeld: testutil.ToFloat64(aggM.held),
			factsCommit: testutil.ToFloat64(factsM.commits), aggCommt: testutil.ToFloat64(aggM.commits),
			totalsEnd: totalsEnd(), procLag: lag(prefix+"processor", source), produced: produced.Load()}
		t.Logf("%5.0fs down: heap %4d MiB, held facts %v aggregates %v, committed facts %v aggregates %v, totals emitted %d, processor lag %d, produced %d",
			s.at.Seconds(), s.heap>>20, s.factsHeld, s.aggHeld, s.factsCommit, s.aggCommt, s.totalsEnd, s.procLag, s.produced)
		samples = append(samples, s)
		return s
	}
	// Commits may still land for a moment after the stop (writes acknowledged just before it);
	// from the first sample on, none may.
	time.Sleep(5 * time.Second)
	first := sample()
	bytesAtFirst := producedBytes.Load()
	for time.Since(stopped) < outage-5*time.Second {
		time.Sleep(min(15*time.Second, outage-5*time.Second-time.Since(stopped)))
		sample()
	}
	last := samples[len(samples)-1]
	backlog := producedBytes.Load() - bytesAtFirst
	testenv.StartService(t, "hbase")
	restarted = true
	t.Logf("HBase back after %v down", time.Since(stopped).Round(time.Second))

	// While HBase was away.
	for _, s := range samples {
		if s.factsHeld == 0 || s.aggHeld == 0 {
			t.Errorf("%v into the outage a sink took records again (held facts %v, aggregates %v)", s.at, s.factsHeld, s.aggHeld)
		}
		if s.factsCommit != first.factsCommit || s.aggCommt != first.aggCommt {
			t.Errorf("%v into the outage commits went on: facts %v -> %v, aggregates %v -> %v", s.at, first.factsCommit, s.factsCommit, first.aggCommt, s.aggCommt)
		}
		if s.procLag < 0 || s.procLag > 5*rate {
			t.Errorf("%v into the outage the processor lags %d records: it stalled", s.at, s.procLag)
		}
	}
	if last.totalsEnd <= first.totalsEnd {
		t.Errorf("the processor emitted no totals while HBase was down (%d -> %d)", first.totalsEnd, last.totalsEnd)
	}
	var maxHeap uint64
	for _, s := range samples {
		maxHeap = max(maxHeap, s.heap)
	}
	// The sinks buffer at most a fetch per partition and their batches; the backlog stays in Kafka.
	const heapBound = 96 << 20
	if growth := int64(maxHeap) - int64(first.heap); growth > heapBound || backlog < 2*heapBound && outage >= 5*time.Minute {
		t.Errorf("live heap grew by %d MiB over the outage (bound %d MiB) while %d MiB of backlog built up", growth>>20, heapBound>>20, backlog>>20)
	}

	// After: the lag drains and the metrics show it.
	close(stopProducing)
	<-producerDone
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var flush []*kgo.Record
	for _, r := range stream.FlushRecords(parts, time.Now().Add(-24*time.Hour).UnixMilli()) {
		flush = append(flush, &kgo.Record{Key: r.Key, Value: r.Value})
	}
	if err := prod.ProduceSync(ctx, flush...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitForSlow(t, "the lag to drain after HBase returned", 10*time.Minute, func() bool {
		return lag(prefix+"facts-sink", source) == 0 && lag(prefix+"processor", source) == 0 &&
			lag(prefix+"aggregates-sink", topo.TotalsTopic()) == 0
	})
	t.Logf("lag drained %v after HBase returned", time.Since(back).Round(time.Second))
	waitFor(t, "the polls to be released", 30*time.Second, func() bool {
		return testutil.ToFloat64(factsM.held) == 0 && testutil.ToFloat64(aggM.held) == 0
	})
	if got := testutil.ToFloat64(factsM.commits) - last.factsCommit; got < float64(last.produced-first.produced) {
		t.Errorf("facts sink committed %v records after the outage, fewer than the %d produced during it", got, last.produced-first.produced)
	}
	for name, m := range map[string]*Metrics{"facts": factsM, "aggregates": aggM} {
		for _, kind := range []string{"revoked", "lost"} {
			if n := testutil.ToFloat64(m.rebalances.WithLabelValues(kind)); n != 0 {
				t.Errorf("%s sink: %v partitions %s: it left its group", name, n, kind)
			}
		}
		if n := testutil.ToFloat64(m.dead.WithLabelValues("rejected")); n != 0 {
			t.Errorf("%s sink dead-lettered %v records as rejected: an outage is not a permanent failure", name, n)
		}
		if n := testutil.ToFloat64(m.failed.WithLabelValues("unavailable")) + testutil.ToFloat64(m.failed.WithLabelValues("retriable")); n == 0 {
			t.Errorf("%s sink counted no failed writes: the outage never reached it", name)
		}
	}
	cancel()
	wg.Wait()
	close(runErrs)
	for err := range runErrs {
		if err != nil {
			t.Errorf("run: %v", err)
		}
	}

	// Exactly the oracle's cells.
	o := stream.NewOracle(layout, time.Now())
	readSource(t, brokers, source, func(r *kgo.Record) {
		o.Feed(stream.SourceRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value})
	})
	if o.Open() != 0 {
		t.Fatalf("%d windows open after the flush events", o.Open())
	}
	for _, tc := range []struct {
		table string
		want  *stream.Cells
	}{{aggTable, o.Aggregates}, {factsTable, o.Facts}} {
		cmp := tc.want.Compare(func(row, _, q []byte) string { return fmt.Sprintf("%x/%s", row, q) })
		sc := c.Scan(hbase.Scan{Table: tc.table, MaxVersions: hbase.AllVersions})
		for {
			r, err := sc.Next(setupCtx(t))
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, cl := range r.Cells {
				cmp.Cell(cl.Row, cl.Family, cl.Qualifier, cl.Timestamp, cl.Value)
			}
		}
		d := cmp.Finish()
		if d.Mismatches() != 0 {
			t.Errorf("%s: %d cells compared, %d missing, %d extra, %d wrong, %d extra versions: %v", tc.table, d.Compared, d.Missing, d.Extra, d.WrongValue, d.ExtraVersions, d.Examples)
		} else {
			t.Logf("%s: %d cells, all as the oracle computes, one version each", tc.table, d.Compared)
		}
	}
	t.Logf("%d events (%d MiB) produced; %d MiB of backlog built up while HBase was down; live heap %d..%d MiB",
		produced.Load(), producedBytes.Load()>>20, backlog>>20, first.heap>>20, maxHeap>>20)
}

func setupCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitForSlow is waitFor for conditions that cost RPCs: it polls every two seconds.
func waitForSlow(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(2 * time.Second)
	}
}

// groupLagOf is how many records of topic group has not committed.
func groupLagOf(ctx context.Context, adm *kadm.Client, group, topic string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		var c int64
		if r, ok := committed.Lookup(topic, o.Partition); ok && r.Err == nil && r.At >= 0 {
			c = r.At
		}
		lag += max(o.Offset-c, 0)
	})
	return lag, nil
}

// readSource reads every record of topic, each partition in offset order.
func readSource(t *testing.T, brokers []string, topic string, fn func(*kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := setupCtx(t)
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset < end {
				fn(r)
				if r.Offset+1 >= end {
					delete(left, r.Partition)
				}
			}
		})
	}
}
