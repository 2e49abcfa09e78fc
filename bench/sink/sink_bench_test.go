package sinkbench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/bench/internal/proccpu"
	"github.com/abacus-stream/abacus/examples/devices"
	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/store/hbasestore"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	partitions = 12
	buckets    = 16
)

// envInt is the integer in environment variable k, 0 (the sink's default) when unset: knobs for
// trying sink settings against the benchmark.
func envInt(k string) int {
	n, _ := strconv.Atoi(os.Getenv(k))
	return n
}

// events is the number of events per run: ABACUS_BENCH_EVENTS, default 1,000,000.
func events() int {
	if n, err := strconv.Atoi(os.Getenv("ABACUS_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

var (
	setupOnce sync.Once
	topic     string
	setupErr  error
)

// produceOnce writes the workload once per run, for every benchmark to read: the readings of
// examples/devices (JSON, about 110 bytes each) of 1,000 devices.
func produceOnce(b *testing.B, brokers []string) string {
	setupOnce.Do(func() {
		topic = fmt.Sprintf("bench-facts-%d", time.Now().UnixNano())
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
			kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(5*time.Millisecond))
		if err != nil {
			setupErr = err
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
			setupErr = err
			return
		}
		base := time.Now().Add(-24 * time.Hour).UnixMilli()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range events() {
			dev := fmt.Sprintf("device-%04d", i%1000)
			v := fmt.Appendf(nil, `{"device":"%s","ts":%d,"temp":%d.%d,"humidity":48.5,"kind":"reading","sensor":"s%d"}`,
				dev, base+int64(i)*10, 15+i%20, i%10, i%3)
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Key: []byte(dev), Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					setupErr = err
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
	})
	if setupErr != nil {
		b.Fatal(setupErr)
	}
	return topic
}

// newTable creates a facts table for one run; the returned func drops it (also left to Cleanup,
// should the run fail first).
func newTable(b *testing.B, c *hbase.Client, name string) (drop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.EnsureTable(ctx, schema.TableLayout{Name: name, Family: "d", SaltBuckets: buckets}); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	drop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_ = c.Admin().DisableTable(ctx, name)
			_ = c.Admin().DeleteTable(ctx, name)
		})
	}
	b.Cleanup(drop)
	return drop
}

// factsEncoder is the facts sink's encoder of the benchmarks' readings into table, as `abacus`
// builds it for a deployment of examples/devices: the facts read by the topology's own decoder
// through sinks.FactsOf.
func factsEncoder(b testing.TB, topic, table string) *sinks.FactsEncoder {
	topo, err := devices.Topology()
	if err == nil {
		topo, err = topo.WithTopicNames(topic+"-", map[string]string{devices.Topic: topic})
	}
	if err != nil {
		b.Fatal(err)
	}
	return &sinks.FactsEncoder{Table: table, Family: "d", SaltBuckets: buckets, MaxFutureSkew: topo.MaxFutureSkew(), Extract: sinks.FactsOf(topo)}
}

// run is what one system did in one run.
type run struct {
	rate   float64 // cells/s from the start (the group's join included) to the last commit
	steady float64 // cells/s from the first commit to the last; 0 when not measured
	cpu    proccpu.Usage
	note   string
}

// report reports r as the benchmark's metrics.
func (r run) report(b *testing.B) {
	b.ReportMetric(r.rate, "cells/s")
	if r.steady > 0 {
		b.ReportMetric(r.steady, "steady-cells/s")
	}
	for unit, v := range r.cpu.Metrics(float64(events())) {
		b.ReportMetric(v, unit)
	}
	b.Logf("CPU: %v; %s", r.cpu, r.note)
}

// env is what every run needs: the workload's topic and the servers.
type env struct {
	brokers []string
	quorum  string
	topic   string
	c       *hbase.Client
	discard bool // the facts sink writes into discardStore
}

func newEnv(b *testing.B) *env {
	brokers, quorum := testenv.Kafka(b), gate.HBaseZooKeeper(b)
	t := produceOnce(b, brokers)
	c, err := hbase.NewClient(context.Background(), hbase.Config{ZooKeeper: quorum})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &env{brokers: brokers, quorum: quorum, topic: t, c: c}
}

// BenchmarkFactsSink runs abacus's facts sink from the start of the topic until every event is
// written and committed.
func BenchmarkFactsSink(b *testing.B) {
	e := newEnv(b)
	for b.Loop() {
		e.factsSink(b).report(b)
	}
}

// BenchmarkFactsSinkDiscard runs the facts sink over the topic into a store that discards every
// cell at once: the rate one sink process reaches by itself (fetch, decode, batch, commit), the
// ceiling it puts on a deployment whose HBase keeps up.
func BenchmarkFactsSinkDiscard(b *testing.B) {
	e := newEnv(b)
	e.discard = true
	for b.Loop() {
		e.factsSink(b).report(b)
	}
}

// discardStore is a store.Writer that acknowledges every cell without keeping it.
type discardStore struct{}

func (discardStore) Write(context.Context, []store.Cell) ([]store.CellError, error) { return nil, nil }

// BenchmarkJavaSinkLoop runs the Java loop (bench/sink/java, built by run.sh) on the same topic.
func BenchmarkJavaSinkLoop(b *testing.B) {
	e := newEnv(b)
	for b.Loop() {
		e.javaLoop(b).report(b)
	}
}

// BenchmarkNativePut writes the very cells the facts sink writes (decoded from the topic before
// the clock starts) straight through the native client's Apply: the rate a sink that did nothing
// but put would reach on the same servers.
func BenchmarkNativePut(b *testing.B) {
	e := newEnv(b)
	for b.Loop() {
		e.nativePut(b).report(b)
	}
}

// BenchmarkSideBySide runs the facts sink, the Java loop and the native Apply of the same cells
// ABACUS_BENCH_ROUNDS times (default 3), interleaved and in a rotated order each round, each on a
// fresh table and an idle cluster (the previous run's table dropped, the servers back to idle), and
// reports each system's median and the ratios of the medians: on cores shared with the servers, a
// run's rate depends on what ran before it, and one run of each says little.
func BenchmarkSideBySide(b *testing.B) {
	e := newEnv(b)
	rounds := envInt("ABACUS_BENCH_ROUNDS")
	if rounds <= 0 {
		rounds = 3
	}
	systems := []struct {
		name string
		run  func(*testing.B) run
	}{{"abacus", e.factsSink}, {"java", e.javaLoop}, {"native", e.nativePut}}
	for b.Loop() {
		rates := map[string][]float64{}
		steady := map[string][]float64{}
		hbaseCPU := map[string][]float64{}
		for round := range rounds {
			for k := range systems {
				s := systems[(round+k)%len(systems)]
				r := s.run(b)
				rates[s.name] = append(rates[s.name], r.rate)
				if r.steady > 0 {
					steady[s.name] = append(steady[s.name], r.steady)
				}
				hbaseCPU[s.name] = append(hbaseCPU[s.name], r.cpu.Metrics(float64(events()))["hbase-cpu-s/M"])
				b.Logf("round %d %-6s %8.0f cells/s (steady %8.0f), CPU: %v; %s", round+1, s.name, r.rate, r.steady, r.cpu, r.note)
			}
		}
		for _, s := range systems {
			b.ReportMetric(median(rates[s.name]), s.name+"-cells/s")
			b.ReportMetric(median(hbaseCPU[s.name]), s.name+"-hbase-cpu-s/M")
		}
		b.ReportMetric(median(steady["abacus"]), "abacus-steady-cells/s")
		b.ReportMetric(median(rates["abacus"])/median(rates["java"]), "abacus/java")
		b.ReportMetric(median(steady["abacus"])/median(rates["native"]), "abacus-steady/native")
		b.ReportMetric(median(rates["abacus"])/median(rates["native"]), "abacus/native")
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// settle waits, after a run's table is dropped, until the servers are idle again (the region
// servers, master and broker together under a tenth of a core over half a second), at most a
// minute: the next run must not pay for this one's flushes and compactions.
func settle(b *testing.B) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		s := proccpu.Take()
		time.Sleep(500 * time.Millisecond)
		u := s.Since()
		if busy := u[proccpu.RegionServer] + u[proccpu.Master] + u[proccpu.Kafka]; busy < 50*time.Millisecond {
			return
		}
	}
	b.Logf("the servers were still busy a minute after the run")
}

// factsSink runs abacus's facts sink over the whole topic on a fresh table.
func (e *env) factsSink(b *testing.B) run {
	b.StopTimer()
	defer b.StartTimer()
	n := events()
	table := fmt.Sprintf("bench_facts_go_%d", time.Now().UnixNano())
	drop := newTable(b, e.c, table)
	defer settle(b)
	defer drop()
	var st store.Writer = discardStore{}
	if !e.discard {
		st, _ = hbasestore.New(e.c, hbasestore.Config{})
	}
	reg := sinksMetrics()
	s, err := sinks.NewFlushThenCommit(sinks.Config{Brokers: e.brokers, Group: "bench-" + table, Topics: []string{e.topic},
		DeadLetterTopic: e.topic + "-dlq", Metrics: reg.m, Logger: slog.New(slog.DiscardHandler),
		MaxWritesInFlight: envInt("ABACUS_BENCH_WRITES_IN_FLIGHT"), MaxBatchRecords: envInt("ABACUS_BENCH_BATCH_RECORDS")},
		factsEncoder(b, e.topic, table), st)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.StartTimer()
	start, cpu := time.Now(), proccpu.Take()
	go func() { done <- s.Run(runCtx) }()
	// The steady rate leaves out the group's join and first fetch: from the first commit to the
	// last.
	var first time.Time
	var firstCommitted float64
	for c := reg.committed(); c < float64(n); c = reg.committed() {
		if first.IsZero() && c > 0 {
			first, firstCommitted = time.Now(), c
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := run{rate: float64(n) / time.Since(start).Seconds(), cpu: cpu.Since()}
	if !first.IsZero() {
		r.steady = (float64(n) - firstCommitted) / time.Since(first).Seconds()
	}
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	r.note = reg.histograms()
	return r
}

// javaLoop runs the Java loop (bench/sink/java, built by run.sh) over the whole topic on a fresh
// table. Its rate is the one it measured itself, from its start (JVM start-up left out); its CPU
// is the whole process's, start-up included.
func (e *env) javaLoop(b *testing.B) run {
	b.StopTimer()
	defer b.StartTimer()
	cpFile := filepath.Join("java", "target", "classpath.txt")
	cp, err := os.ReadFile(cpFile)
	if err != nil {
		b.Skipf("Java program not built (run bench/sink/run.sh): %v", err)
	}
	table := fmt.Sprintf("bench_facts_java_%d", time.Now().UnixNano())
	drop := newTable(b, e.c, table)
	defer settle(b)
	defer drop()
	cmd := exec.Command("java", "-Xmx1g", "-cp", filepath.Join("java", "target", "sink-java-bench-1.jar")+":"+strings.TrimSpace(string(cp)),
		"abacus.bench.SinkLoop", strings.Join(e.brokers, ","), e.quorum, e.topic, "bench-"+table, table, "d", strconv.Itoa(buckets), strconv.Itoa(events()))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	b.StartTimer()
	cpu := proccpu.Take()
	if err := cmd.Run(); err != nil {
		b.Fatalf("java sink loop: %v\n%s", err, out.String())
	}
	b.StopTimer()
	// The loop has exited, so /proc no longer has it: its own CPU comes from its exit status.
	r := run{cpu: cpu.Since()}
	r.cpu[proccpu.JavaPeer] = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	m := regexp.MustCompile(`cells/s=(\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		b.Fatalf("java sink loop printed no rate:\n%s", out.String())
	}
	r.rate, _ = strconv.ParseFloat(m[1], 64)
	return r
}

// nativePut writes the cells the facts sink would write for the topic, decoded before the clock
// starts, through Client.Apply on a fresh table: batches of 20,000 cells, four in flight, as
// bench/hbase's put does.
func (e *env) nativePut(b *testing.B) run {
	b.StopTimer()
	defer b.StartTimer()
	table := fmt.Sprintf("bench_facts_native_%d", time.Now().UnixNano())
	cells := e.cells(b, table)
	drop := newTable(b, e.c, table)
	defer settle(b)
	defer drop()
	ctx := context.Background()
	const chunk = 20_000
	b.StartTimer()
	start, cpu := time.Now(), proccpu.Take()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	sem := make(chan struct{}, 4)
	for from := 0; from < len(cells); from += chunk {
		to := min(from+chunk, len(cells))
		ms := make([]*hbase.Mutation, 0, to-from)
		for i := from; i < to; i++ {
			c := &cells[i]
			ms = append(ms, hbase.NewPut(table, c.Row).Add("d", c.Qualifier, c.Timestamp, c.Value))
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := e.c.Apply(ctx, ms); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	wg.Wait()
	r := run{rate: float64(len(cells)) / time.Since(start).Seconds(), cpu: cpu.Since()}
	b.StopTimer()
	select {
	case err := <-errc:
		b.Fatal(err)
	default:
	}
	return r
}

var (
	cellsOnce sync.Once
	cellsOf   []store.Cell
)

// cells reads the whole topic once and encodes it as the facts sink does (for table).
func (e *env) cells(b *testing.B, table string) []store.Cell {
	cellsOnce.Do(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		enc := factsEncoder(b, e.topic, "placeholder")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for len(cellsOf) < events() {
			f := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				b.Fatalf("reading the topic: %v after %d records", err, len(cellsOf))
			}
			f.EachRecord(func(rec *kgo.Record) {
				var err error
				if cellsOf, err = enc.Encode(rec, cellsOf); err != nil {
					b.Fatal(err)
				}
			})
		}
	})
	out := make([]store.Cell, len(cellsOf))
	for i, c := range cellsOf {
		c.Table = table
		out[i] = c
	}
	return out
}
