package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/chaos/stream"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/abacus-stream/abacus/topology"
)

// pipeline is the whole abacus pipeline in the test process, on the real Kafka and HBase: the
// processor of the chaos topology (package internal/chaos/stream), the aggregates sink and the facts
// sink, each sink with an HBase client of its own, fed by a steady generated stream. The stream's
// oracle says which cells the tables must hold at the end (verify).
type pipeline struct {
	t                    *testing.T
	brokers              []string
	prefix, source       string
	parts                int
	topo                 *topology.Topology
	aggTable, factsTable string
	aggM, factsM         *Metrics
	aggC, factsC         *hbase.Client // the sinks' own clients
	hb                   *hbase.Client // the test's client
	watch                *queryWatch   // queries asked meanwhile, or nil
	adm                  *kadm.Client
	prod                 *kgo.Client

	produced, producedBytes atomic.Int64
	stopProduce, produceEnd chan struct{}

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	runErrs chan error
}

const pipelineBuckets = 8

// startPipeline starts the pipeline and a producer of rate events a second, each padded with pad
// bytes.
func startPipeline(t *testing.T, name string, rate, pad int) *pipeline {
	t.Helper()
	p := &pipeline{t: t, brokers: testenv.Kafka(t), parts: 4, runErrs: make(chan error, 3),
		stopProduce: make(chan struct{}), produceEnd: make(chan struct{})}
	hcfg := testenv.HBaseConfig(t) // plain, or Kerberized under ABACUS_HBASE_AUTH=kerberos
	p.prefix = fmt.Sprintf("%s-%d-", name, time.Now().UnixNano())
	p.source = p.prefix + "events"
	topo, err := stream.Topology()
	if err != nil {
		t.Fatal(err)
	}
	if p.topo, err = topo.WithTopicNames(p.prefix, map[string]string{stream.SourceTopic: p.source}); err != nil {
		t.Fatal(err)
	}
	createTopics(t, p.brokers, int32(p.parts), p.source, p.topo.TotalsTopic(), p.topo.DeadLetterTopic())
	p.hb = testenv.HBaseClient(t)
	tbl := strings.ReplaceAll(strings.TrimSuffix(p.prefix, "-"), "-", "_")
	p.aggTable, p.factsTable = tbl+"_agg", tbl+"_facts"
	for _, tb := range []string{p.aggTable, p.factsTable} {
		testenv.DropTableAtEnd(t, p.hb, tb)
		l := schema.TableLayout{Name: tb, Family: "d", SaltBuckets: pipelineBuckets, Versions: 5}
		err := hbaseStore(t, p.hb).EnsureTable(setupCtx(t), l)
		if err == nil && tb == p.aggTable {
			testenv.DropTableAtEnd(t, p.hb, schema.KeyIndexTable(tb))
			err = hbaseStore(t, p.hb).EnsureTable(setupCtx(t), schema.KeyIndexLayout(l))
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	p.ctx, p.cancel = context.WithCancel(context.Background())
	t.Cleanup(p.cancel)
	log := testLogger(t)
	// The processor, with an idle timeout longer than any test: stream time never follows the
	// wall clock, so the oracle's totals are exact.
	proc, err := processors.New(p.topo, processors.Config{Brokers: p.brokers, Group: p.prefix + "processor",
		StoragePath: filepath.Join(t.TempDir(), "state"), IdleTimeout: 6 * time.Hour, Registerer: prometheus.NewRegistry(),
		Logger: log.With("part", "processor")})
	if err != nil {
		t.Fatal(err)
	}
	p.wg.Go(func() { p.runErrs <- proc.Run(p.ctx) })
	newSink := func(name, group string, topics []string, enc Encoder) (*Metrics, *hbase.Client) {
		hc, err := hbase.NewClient(setupCtx(t), hcfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hc.Close() })
		st, err := hbasestore.New(hc, hbasestore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m := NewMetrics(prometheus.NewRegistry(), name)
		s, err := NewFlushThenCommit(Config{Brokers: p.brokers, Group: group, Topics: topics, DeadLetterTopic: p.topo.DeadLetterTopic(),
			MaxBatchRecords: 2000, FlushInterval: 500 * time.Millisecond, Metrics: m, Logger: log.With("part", name)}, enc, st)
		if err != nil {
			t.Fatal(err)
		}
		p.wg.Go(func() { p.runErrs <- s.Run(p.ctx) })
		return m, hc
	}
	p.aggM, p.aggC = newSink("aggregates", p.prefix+"aggregates-sink", []string{p.topo.TotalsTopic()},
		&AggregatesEncoder{Table: p.aggTable, Family: "d", SaltBuckets: pipelineBuckets, KeyIndex: schema.KeyIndexTable(p.aggTable)})
	p.factsM, p.factsC = newSink("facts", p.prefix+"facts-sink", []string{p.source},
		&FactsEncoder{Table: p.factsTable, Family: "d", SaltBuckets: pipelineBuckets, MaxFutureSkew: p.topo.MaxFutureSkew(), Extract: FactsOf(p.topo),
			LeaveRejectsToProcessor: true})

	// A steady stream, days in the past, until stopped.
	p.prod, err = kgo.NewClient(kgo.SeedBrokers(p.brokers...), kgo.DefaultProduceTopic(p.source),
		kgo.RecordPartitioner(franz.Partitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.prod.Close)
	p.adm = kadm.NewClient(p.prod)
	go func() {
		defer close(p.produceEnd)
		g := &stream.Generator{Seed: 11, Entities: 200, PadBytes: pad,
			Start: time.Now().Add(-3 * 24 * time.Hour).UnixMilli(), Step: 10 * time.Millisecond}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		t0 := time.Now()
		var n int64
		var recs []stream.Record
		for {
			select {
			case <-p.stopProduce:
				return
			case <-tick.C:
			}
			for target := int64(time.Since(t0).Seconds() * float64(rate)); n < target; n++ {
				for _, r := range g.Next(recs[:0]) {
					p.producedBytes.Add(int64(len(r.Value)))
					p.prod.Produce(p.ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
						if err != nil && p.ctx.Err() == nil {
							t.Errorf("produce: %v", err)
						}
					})
				}
			}
			p.produced.Store(n)
		}
	}()
	return p
}

// lag is how many records of topic group has not committed, or -1 when it cannot be read.
func (p *pipeline) lag(group, topic string) int64 {
	c, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	l, err := kafkaread.GroupLag(c, p.adm, group, topic)
	if err != nil {
		return -1
	}
	return l
}

func (p *pipeline) drained() bool {
	return p.lag(p.prefix+"facts-sink", p.source) == 0 && p.lag(p.prefix+"processor", p.source) == 0 &&
		p.lag(p.prefix+"aggregates-sink", p.topo.TotalsTopic()) == 0
}

// totalsEnd is the number of records in the totals topic: what the processor has emitted.
func (p *pipeline) totalsEnd() int64 {
	c, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	ends, err := p.adm.ListEndOffsets(c, p.topo.TotalsTopic())
	if err != nil {
		return -1
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// endStream stops the producer and closes every window with the stream's flush events.
func (p *pipeline) endStream() {
	close(p.stopProduce)
	<-p.produceEnd
	if err := p.prod.Flush(p.ctx); err != nil {
		p.t.Fatal(err)
	}
	var flush []*kgo.Record
	for _, r := range stream.FlushRecords(p.parts, time.Now().Add(-24*time.Hour).UnixMilli()) {
		flush = append(flush, &kgo.Record{Key: r.Key, Value: r.Value})
	}
	if err := p.prod.ProduceSync(p.ctx, flush...).FirstErr(); err != nil {
		p.t.Fatal(err)
	}
}

// checkStayed fails the test if a sink dead-lettered anything (what happened, cause, is no bad
// record) or had a partition revoked or lost (it left its group).
func (p *pipeline) checkStayed(cause string) {
	p.t.Helper()
	for name, m := range map[string]*Metrics{"facts": p.factsM, "aggregates": p.aggM} {
		if n := vecSum(m.dead); n != 0 {
			p.t.Errorf("%s sink dead-lettered %v records: %s is not a bad record", name, n, cause)
		}
		for _, kind := range []string{"revoked", "lost"} {
			if n := testutil.ToFloat64(m.rebalances.WithLabelValues(kind)); n != 0 {
				p.t.Errorf("%s sink: %v partitions %s: it left its group", name, n, kind)
			}
		}
	}
}

// stop stops the processor and the sinks and reports their errors.
func (p *pipeline) stop() {
	p.cancel()
	p.wg.Wait()
	close(p.runErrs)
	for err := range p.runErrs {
		if err != nil {
			p.t.Errorf("run: %v", err)
		}
	}
}

// verify checks that both tables hold exactly the cells the oracle computes from the source
// topic, one version each.
func (p *pipeline) verify() {
	t := p.t
	o := stream.NewOracle(stream.Layout{AggregatesBuckets: pipelineBuckets, FactsBuckets: pipelineBuckets, Family: "d"})
	if err := kafkaread.All(setupCtx(t), p.brokers, p.source, func(r *kgo.Record) {
		o.Feed(stream.SourceRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp})
	}); err != nil {
		t.Fatal(err)
	}
	if o.Open() != 0 {
		t.Fatalf("%d windows open after the flush events", o.Open())
	}
	newest := map[string]int64{} // index row of every aggregate row's set | key and key -> its newest window end
	for _, tc := range []struct {
		table string
		want  *stream.Cells
	}{{p.aggTable, o.Aggregates}, {p.factsTable, o.Facts}} {
		cmp := tc.want.Compare(func(row, _, q []byte) string { return fmt.Sprintf("%x/%s", row, q) })
		p.scanCells(hbase.Scan{Table: tc.table, MaxVersions: hbase.AllVersions}, func(cl *hbase.Cell) {
			cmp.Cell(cl.Row, cl.Family, cl.Qualifier, cl.Timestamp, cl.Value)
			if tc.table == p.aggTable {
				if e, set, _, err := schema.ParseAggregateRow(cl.Row); err == nil {
					for _, s := range []string{set, schema.KeyIndexEverySet} { // its set's row and its row among all keys
						k := string(schema.KeyIndexRow(s, e))
						newest[k] = max(newest[k], cl.Timestamp)
					}
				}
			}
		})
		d := cmp.Finish()
		if d.Mismatches() != 0 {
			t.Errorf("%s: %d cells compared, %d missing, %d extra, %d wrong, %d extra versions: %v", tc.table, d.Compared, d.Missing, d.Extra, d.WrongValue, d.ExtraVersions, d.Examples)
		} else {
			t.Logf("%s: %d cells, all as the oracle computes from %d records, one version each", tc.table, d.Compared, o.Records)
		}
	}
	p.verifyKeyIndex(newest)
}

// scanCells calls fn with every cell sc reads, failing the test on an error.
func (p *pipeline) scanCells(s hbase.Scan, fn func(*hbase.Cell)) {
	sc := p.hb.Scan(s)
	defer sc.Close()
	for {
		r, err := sc.Next(setupCtx(p.t))
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			p.t.Fatal(err)
		}
		for i := range r.Cells {
			fn(&r.Cells[i])
		}
	}
}

// verifyKeyIndex checks the key index the aggregates sink wrote against the aggregates table:
// one row for every set and key that has windows and one for every key among all sets
// (schema.KeyIndexEverySet), none for any other, each (newest version)
// with the timestamp its newest window gives it, whatever crashes and retries came between.
func (p *pipeline) verifyKeyIndex(newest map[string]int64) {
	t := p.t
	got := map[string]int64{}
	epochs := map[string]bool{}
	p.scanCells(hbase.Scan{Table: schema.KeyIndexTable(p.aggTable)}, func(cl *hbase.Cell) {
		if string(cl.Row) == string(schema.EpochRow) {
			epochs[string(cl.Qualifier)] = true
			return
		}
		got[string(cl.Row)] = cl.Timestamp
	})
	bad := 0
	// Every window here started days ago: each set's writes moved its epoch, so that query
	// caches drop what they kept of it.
	for k := range newest {
		if set, _, err := schema.ParseKeyIndexRow([]byte(k)); err == nil && set != schema.KeyIndexEverySet && !epochs[set] {
			if bad++; bad <= 5 {
				t.Errorf("key index: set %s wrote settled windows but has no epoch cell (sets with one: %v)", set, epochs)
			}
		}
	}
	for k, end := range newest {
		if ts, ok := got[k]; !ok || ts != schema.KeyIndexTimestamp(end, 0) {
			set, key, _ := schema.ParseKeyIndexRow([]byte(k))
			if bad++; bad <= 5 {
				t.Errorf("key index: %s %s has timestamp %d (present %v), want %d from its newest window ending %d", set, key, ts, ok, schema.KeyIndexTimestamp(end, 0), end)
			}
		}
	}
	for k := range got {
		if _, ok := newest[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("key index: row %x names no set and key of %s", k, p.aggTable)
			}
		}
	}
	if bad == 0 {
		t.Logf("key index: %d set and key pairs, each as the aggregates table says", len(newest))
	}
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
