package sinkbench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/sinks"
	"github.com/abacus-stream/abacus/store/hbasestore"
)

// killRate is the steady input, events a second, while a region server is killed: far below
// what either sink writes, so what is measured is the outage and the catch-up, not throughput.
const killRate = 5000

// BenchmarkRegionServerKill SIGKILLs the region server holding most of the facts table's regions
// (not hbase:meta's) while a sink writes a steady stream, on the HBase cluster of
// testenv/services.sh (HBASE_REGIONSERVERS=3), once with abacus's facts sink and once with the
// Java loop (KafkaConsumer + BufferedMutator + flush + commitSync). Measured from outside, by the
// group's committed offsets, the same way for both: s-to-resume, from the kill to the first commit
// that covers records produced after it (every batch writes to every region, the moved ones
// included), and s-to-lag0, to the group being back within half a second of the input. The
// killed server is started again and the balancer run before the next system's turn.
func BenchmarkRegionServerKill(b *testing.B) {
	cl := testenv.HBaseClusterFor(b)
	brokers := testenv.Kafka(b)
	if q := testenv.HBaseConfig(b).ZooKeeper; q != cl.ZooKeeper {
		b.Fatalf("HBase at %s is not the cluster at %s: evaluate the cluster's env", q, cl.ZooKeeper)
	}
	for _, system := range []string{"abacus", "java"} {
		b.Run(system, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				killRun(b, cl, brokers, system)
			}
		})
	}
}

func killRun(b *testing.B, cl *testenv.HBaseCluster, brokers []string, system string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := testenv.HBaseClient(b)
	table := fmt.Sprintf("bench_kill_%s_%d", system, time.Now().UnixNano())
	newTable(b, hc, table)
	topic, group := table, "bench-"+table
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	adm := kadm.NewClient(prod)
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		b.Fatal(err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { steadyProduce(ctx, prod) })
	stopSink := startKillSink(b, ctx, &wg, system, brokers, hc, topic, group, table)
	defer stopSink()

	offsets := func() (end, lag int64) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(c, topic)
		if err != nil || ends.Error() != nil {
			return -1, -1
		}
		committed, err := adm.FetchOffsets(c, group)
		if err != nil {
			committed = nil
		}
		ends.Each(func(o kadm.ListedOffset) {
			end += o.Offset
			at := int64(0)
			if r, ok := committed.Lookup(topic, o.Partition); ok && r.Err == nil && r.At >= 0 {
				at = r.At
			}
			lag += max(o.Offset-at, 0)
		})
		return end, lag
	}
	waitUntil(b, "the sink to keep up before the kill", 3*time.Minute, func() bool {
		end, lag := offsets()
		return end > 10*killRate && lag >= 0 && lag < killRate/2
	})

	n := busiestServer(b, cl, hc, table)
	endAtKill, _ := offsets()
	killed := time.Now()
	cl.Kill(b, n)
	// When hbase:meta has every region of the table open on a live server again: the moment
	// from which a client can write, whatever the sink. Polled beside the sink's progress, so
	// that the resume can be measured from it too, free of how long HBase took to notice.
	reopenedc := make(chan time.Duration, 1)
	go func() {
		dead := cl.Addr(n)
		for ctx.Err() == nil {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			rs, err := hc.Admin().Regions(c, table)
			cancel()
			open := err == nil && len(rs) > 0
			for i := range rs {
				if !rs[i].Offline && !rs[i].Split && (!rs[i].Serving() || rs[i].Server == dead) {
					open = false
				}
			}
			if open {
				reopenedc <- time.Since(killed)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var resume, lag0 time.Duration
	waitUntil(b, "commits covering records produced after the kill", 5*time.Minute, func() bool {
		end, lag := offsets()
		return end >= 0 && end-lag > endAtKill+killRate/2
	})
	resume = time.Since(killed)
	waitUntil(b, "the lag back within half a second of input", 5*time.Minute, func() bool {
		end, lag := offsets()
		return end >= 0 && lag < killRate/2
	})
	lag0 = time.Since(killed)
	b.Logf("%s: region server %d SIGKILLed; commits resumed after %v, lag back to %d events after %v",
		system, n, resume.Round(10*time.Millisecond), killRate/2, lag0.Round(10*time.Millisecond))
	b.ReportMetric(resume.Seconds(), "s-to-resume")
	b.ReportMetric(lag0.Seconds(), "s-to-lag0")
	select {
	case reopened := <-reopenedc:
		b.Logf("%s: the regions were open again %v after the kill: resumed %v after that", system,
			reopened.Round(10*time.Millisecond), (resume - reopened).Round(10*time.Millisecond))
		b.ReportMetric(reopened.Seconds(), "s-to-reopen")
		b.ReportMetric((resume - reopened).Seconds(), "s-reopen-to-resume")
	case <-time.After(10 * time.Second):
		b.Logf("%s: hbase:meta never showed every region open on a live server", system)
	}

	stopSink()
	cancel()
	cl.Start(b, n)
	bctx, bcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer bcancel()
	if _, err := hc.Admin().Balance(bctx); err != nil {
		b.Logf("balancer after the restart: %v", err)
	}
}

// steadyProduce writes killRate readings a second of 1,000 devices until ctx ends.
func steadyProduce(ctx context.Context, prod *kgo.Client) {
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	start, i := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for target := int(time.Since(start).Seconds() * killRate); i < target; i++ {
			dev := fmt.Sprintf("device-%04d", i%1000)
			v := fmt.Appendf(nil, `{"device":"%s","ts":%d,"temp":%d.%d,"humidity":48.5,"kind":"reading","sensor":"s%d"}`,
				dev, base+int64(i)*10, 15+i%20, i%10, i%3)
			prod.Produce(ctx, &kgo.Record{Key: []byte(dev), Value: v}, nil)
		}
	}
}

// startKillSink starts system's sink on topic and returns what stops it.
func startKillSink(b *testing.B, ctx context.Context, wg *sync.WaitGroup, system string, brokers []string, hc *hbase.Client, topic, group, table string) func() {
	if system == "java" {
		cp, err := os.ReadFile(filepath.Join("java", "target", "classpath.txt"))
		if err != nil {
			b.Skipf("Java program not built (run bench/sink/run.sh): %v", err)
		}
		var out bytes.Buffer
		cmd := exec.Command("java", "-Xmx1g", "-cp", filepath.Join("java", "target", "sink-java-bench-1.jar")+":"+strings.TrimSpace(string(cp)),
			"abacus.bench.SinkLoop", strings.Join(brokers, ","), testenv.HBaseConfig(b).ZooKeeper, topic, group, table, "d",
			strconv.Itoa(buckets), strconv.FormatInt(1<<62, 10))
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var once sync.Once
		return func() {
			once.Do(func() {
				select {
				case err := <-exited:
					b.Errorf("the Java loop exited during the run (%v):\n%s", err, out.String())
				default:
					_ = cmd.Process.Kill()
					<-exited
				}
			})
		}
	}
	// The facts sink with its own client, as a sink process has.
	sc, err := hbase.NewClient(ctx, testenv.HBaseConfig(b))
	if err != nil {
		b.Fatal(err)
	}
	st, _ := hbasestore.New(sc, hbasestore.Config{})
	s, err := sinks.NewFlushThenCommit(sinks.Config{Brokers: brokers, Group: group, Topics: []string{topic},
		DeadLetterTopic: topic + "-dlq", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, factsEncoder(b, topic, table), st)
	if err != nil {
		b.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	wg.Go(func() { done <- s.Run(sctx) })
	var once sync.Once
	return func() {
		once.Do(func() {
			scancel()
			if err := <-done; err != nil && sctx.Err() == nil {
				b.Errorf("facts sink: %v", err)
			}
			sc.Close()
		})
	}
}

// busiestServer is the region server, not hbase:meta's, holding most of table's regions.
func busiestServer(b *testing.B, cl *testenv.HBaseCluster, hc *hbase.Client, table string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := hc.Admin().Regions(ctx, table)
	if err != nil {
		b.Fatal(err)
	}
	per := map[int]int{}
	for _, r := range rs {
		per[cl.Number(r.Server)]++
	}
	meta, best := cl.MetaServer(b), 0
	for n := 1; n <= cl.Servers; n++ {
		if n != meta && (best == 0 || per[n] > per[best]) {
			best = n
		}
	}
	b.Logf("regions of %s per server %v (meta on %d): killing %d", table, per, meta, best)
	return best
}

// waitUntil polls cond every 100 ms until it holds, failing the benchmark after limit.
func waitUntil(b *testing.B, what string, limit time.Duration, cond func() bool) {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
