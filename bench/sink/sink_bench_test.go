package sinkbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/sinks"
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

// produceOnce writes the workload once per run, for both benchmarks to read: JSON readings of 1,000
// devices, about 110 bytes each.
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

func newTable(b *testing.B, c *hbase.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.EnsureTable(ctx, schema.TableLayout{Name: name, Family: "d", SaltBuckets: buckets}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.Admin().DisableTable(ctx, name)
		_ = c.Admin().DeleteTable(ctx, name)
	})
}

type reading struct {
	Device string `json:"device"`
	TS     int64  `json:"ts"`
	Kind   string `json:"kind"`
}

// factsEncoder is the facts sink's encoder of the benchmarks' readings into table.
func factsEncoder(table string) *sinks.FactsEncoder {
	return &sinks.FactsEncoder{Table: table, Family: "d", SaltBuckets: buckets, Extract: func(rec *kgo.Record) (sinks.Fact, error) {
		var r reading
		if err := json.Unmarshal(rec.Value, &r); err != nil {
			return sinks.Fact{}, err
		}
		return sinks.Fact{Entity: r.Device, EventTime: r.TS, Type: r.Kind}, nil
	}}
}

// BenchmarkFactsSink runs abacus's facts sink from the start of the topic until every event is
// written and committed.
func BenchmarkFactsSink(b *testing.B) {
	brokers, quorum := testenv.Kafka(b), gate.HBaseZooKeeper(b)
	t := produceOnce(b, brokers)
	ctx := context.Background()
	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: quorum})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	n := events()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		table := fmt.Sprintf("bench_facts_go_%d", time.Now().UnixNano())
		newTable(b, c, table)
		st, _ := hbasestore.New(c, hbasestore.Config{})
		enc := factsEncoder(table)
		reg := sinksMetrics()
		s, err := sinks.NewFlushThenCommit(sinks.Config{Brokers: brokers, Group: "bench-" + table, Topics: []string{t},
			DeadLetterTopic: t + "-dlq", Metrics: reg.m, Logger: slog.New(slog.DiscardHandler),
			MaxWritesInFlight: envInt("ABACUS_BENCH_WRITES_IN_FLIGHT"), MaxBatchRecords: envInt("ABACUS_BENCH_BATCH_RECORDS")}, enc, st)
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { done <- s.Run(runCtx) }()
		// The steady rate leaves out the group's join and first fetch: from the first commit to
		// the last.
		var first time.Time
		var firstCommitted float64
		for c := reg.committed(); c < float64(n); c = reg.committed() {
			if first.IsZero() && c > 0 {
				first, firstCommitted = time.Now(), c
			}
			time.Sleep(5 * time.Millisecond)
		}
		elapsed := time.Since(start)
		if !first.IsZero() {
			b.ReportMetric((float64(n)-firstCommitted)/time.Since(first).Seconds(), "steady-cells/s")
		}
		b.StopTimer()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "cells/s")
		b.Logf("%d events in %v: %s", n, elapsed.Round(time.Millisecond), reg.histograms())
	}
}

// BenchmarkJavaSinkLoop runs the Java loop (bench/sink/java, built by run.sh) on the same topic.
func BenchmarkJavaSinkLoop(b *testing.B) {
	brokers, quorum := testenv.Kafka(b), gate.HBaseZooKeeper(b)
	cpFile := filepath.Join("java", "target", "classpath.txt")
	cp, err := os.ReadFile(cpFile)
	if err != nil {
		b.Skipf("Java program not built (run bench/sink/run.sh): %v", err)
	}
	t := produceOnce(b, brokers)
	c, err := hbase.NewClient(context.Background(), hbase.Config{ZooKeeper: quorum})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	re := regexp.MustCompile(`cells/s=(\d+)`)
	for i := 0; i < b.N; i++ {
		table := fmt.Sprintf("bench_facts_java_%d", time.Now().UnixNano())
		newTable(b, c, table)
		cmd := exec.Command("java", "-Xmx1g", "-cp", filepath.Join("java", "target", "sink-java-bench-1.jar")+":"+strings.TrimSpace(string(cp)),
			"abacus.bench.SinkLoop", strings.Join(brokers, ","), quorum, t, "bench-"+table, table, "d", strconv.Itoa(buckets), strconv.Itoa(events()))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("java sink loop: %v\n%s", err, out.String())
		}
		m := re.FindStringSubmatch(out.String())
		if m == nil {
			b.Fatalf("java sink loop printed no rate:\n%s", out.String())
		}
		rate, _ := strconv.ParseFloat(m[1], 64)
		b.ReportMetric(rate, "cells/s")
	}
}
