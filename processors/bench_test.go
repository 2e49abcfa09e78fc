package processors_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProcessorRealKafka measures the processor alone (input topic -> totals topic) on the
// real broker: 1-minute tumbling windows with count + sum + max, 100k entities, 12 partitions,
// beside a naive goka processor (decode, SetValue per event, no windows) over the same topic.
// It runs once whatever b.N is (use -benchtime=1x); ABACUS_BENCH_EVENTS sets the event count.
func BenchmarkProcessorRealKafka(b *testing.B) {
	brokers := testenv.Kafka(b)
	n := 1_000_000
	if s := os.Getenv("ABACUS_BENCH_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	const entities, parts = 100_000, 12
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	name := uniqueName("bench")
	input := name + "-in"
	createTopic(ctx, b, brokers, input, parts)

	// Event time advances 10 minutes over the run, so windows close as it goes.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(input),
		kgo.RecordPartitioner(partitioner.Kgo()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	span := int64(10 * 60_000)
	// The windows that must be closed at the end: those whose end each partition's last event
	// time has reached.
	type win struct {
		dev   string
		start int64
	}
	wins := map[win]int32{}
	last := map[int32]int64{}
	for i := range n {
		r := reading{Dev: "dev-" + strconv.Itoa(i*7919%entities), TS: baseTime + int64(i)*span/int64(n), V: float64(i % 1000)}
		p := partitionOf(r.Dev, parts)
		wins[win{r.Dev, r.TS / 60_000 * 60_000}] = p
		last[p] = max(last[p], r.TS)
		v, _ := json.Marshal(r)
		cl.Produce(ctx, &kgo.Record{Key: []byte(r.Dev), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	closed := 0
	for w, p := range wins {
		if w.start+60_000 <= last[p] {
			closed++
		}
	}
	b.Logf("produced %d events to %s; %d windows, %d of them closed by the stream", n, input, len(wins), closed)

	// abacus
	bld := topology.New(name)
	topology.NewSource(bld, input, topology.JSON[reading](),
		func(r reading) string { return r.Dev },
		func(r reading) time.Time { return time.UnixMilli(r.TS) }).
		Aggregate("minute", windows.Tumbling(time.Minute)).Grace(0).Count("n").Sum("sum", "v").Max("max", "v")
	topo, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := processors.Config{Brokers: brokers, StoragePath: b.TempDir(), Registerer: reg, IdleTimeout: time.Hour}
	// The run replays ten minutes of event time in seconds, so with the default FinalRetention no
	// closed window leaves the table during it; ABACUS_BENCH_RETENTION (a duration) shortens it
	// to model a live stream, where windows close minutes apart.
	if s := os.Getenv("ABACUS_BENCH_RETENTION"); s != "" {
		if cfg.FinalRetention, err = time.ParseDuration(s); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	stop := runProcessor(b, topo, cfg)
	for counter(b, reg, "abacus_processor_events_in_total") < float64(n) ||
		counter(b, reg, "abacus_processor_windows_emitted_total") < float64(closed) {
		if ctx.Err() != nil {
			b.Fatal("abacus processor did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	report(b, "abacus", n, wall, cpu)

	// naive goka: one SetValue per event, no windows.
	var seen atomic.Int64
	group := goka.Group(name + "-naive")
	graph := goka.DefineGroup(group,
		goka.Input(goka.Stream(input), new(codec.Bytes), func(ctx goka.Context, msg any) {
			var r reading
			if err := json.Unmarshal(msg.([]byte), &r); err != nil {
				ctx.Fail(err)
			}
			var st [24]byte
			if v := ctx.Value(); v != nil {
				copy(st[:], v.([]byte))
			}
			cnt := binary.BigEndian.Uint64(st[0:]) + 1
			sum := math.Float64frombits(binary.BigEndian.Uint64(st[8:])) + r.V
			mx := max(math.Float64frombits(binary.BigEndian.Uint64(st[16:])), r.V)
			binary.BigEndian.PutUint64(st[0:], cnt)
			binary.BigEndian.PutUint64(st[8:], math.Float64bits(sum))
			binary.BigEndian.PutUint64(st[16:], math.Float64bits(mx))
			ctx.SetValue(st[:])
			seen.Add(1)
		}),
		goka.Persist(new(codec.Bytes)))
	sc := goka.DefaultConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	tmc := goka.NewTopicManagerConfig()
	tmc.Table.Replication, tmc.Stream.Replication = 1, 1
	proc, err := goka.NewProcessor(brokers, graph,
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithConfig(sc, tmc)),
		goka.WithConsumerGroupBuilder(goka.ConsumerGroupBuilderWithConfig(sc)),
		goka.WithConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(sc)),
		goka.WithProducerBuilder(goka.ProducerBuilderWithConfig(sc)),
		goka.WithStorageBuilder(storage.DefaultBuilder(b.TempDir())),
		goka.WithLogger(gokaDiscard{}))
	if err != nil {
		b.Fatal(err)
	}
	cpu0, t0 = cpuTime(), time.Now()
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(pctx) }()
	for seen.Load() < int64(n) {
		if ctx.Err() != nil {
			b.Fatal("naive processor did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
	wall, cpu = time.Since(t0), cpuTime()-cpu0
	pcancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	report(b, "naive", n, wall, cpu)
}

func report(b *testing.B, who string, n int, wall, cpu time.Duration) {
	eps := float64(n) / wall.Seconds()
	cpm := cpu.Seconds() / (float64(n) / 1e6)
	b.ReportMetric(eps, who+"-events/s")
	b.ReportMetric(cpm, who+"-cpu-s/Mevents")
	b.Logf("%s: %d events in %v: %.0f events/s, %.2f CPU-s per million events", who, n, wall.Round(time.Millisecond), eps, cpm)
}

type gokaDiscard struct{}

func (gokaDiscard) Print(...any)          {}
func (gokaDiscard) Println(...any)        {}
func (gokaDiscard) Printf(string, ...any) {}
