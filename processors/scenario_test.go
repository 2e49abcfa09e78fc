package processors_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/kafkaread"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

const scenarioPartitions = 4

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()) }

func createTopic(ctx context.Context, t testing.TB, brokers []string, topic string, parts int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, int32(parts), 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// endOffsets returns the number of records in topic (sum of end offsets; nothing is deleted).
func endOffsets(ctx context.Context, t testing.TB, brokers []string, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n, err := kafkaread.EndSum(ctx, kadm.NewClient(cl), topic)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// runScenario produces a stream with out-of-order, late, future-dated, duplicated and undecodable
// records, runs the processor, and compares every final total with the oracle. It then rewinds the
// group to offset 0 (every record is replayed, as after a crash between the changelog write and
// the offset commit), produces a second batch, and checks that nothing was counted twice.
//
// With repartition, record keys are not the entity (the source declares Repartition) and the topic
// has one partition: re-keyed events from several source partitions would interleave in the loop
// topic in an order no oracle can know.
func runScenario(t *testing.T, brokers []string, repartition bool) {
	parts := scenarioPartitions
	if repartition {
		parts = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := uniqueName("scn")
	input := name + "-in"
	createTopic(ctx, t, brokers, input, parts)
	topo := scenarioTopology(t, name, input, repartition)

	insA := genInputs(1, 1500, 20, baseTime)
	if repartition {
		rekey(insA)
	}
	produce(ctx, t, brokers, input, insA)
	o := newOracle(parts)
	for _, in := range insA {
		o.feed(in)
	}
	o.idle()

	storage := t.TempDir()
	cfg := func(reg *prometheus.Registry) processors.Config {
		return processors.Config{Brokers: brokers, StoragePath: storage, IdleTimeout: 3 * time.Second,
			TickInterval: 200 * time.Millisecond, Registerer: reg, Logger: testLogger(t)}
	}
	reg := prometheus.NewRegistry()
	stop := runProcessor(t, topo, cfg(reg))
	readTotals(ctx, t, brokers, topo.TotalsTopic(), o.hasAllFinals)
	// Event times are months behind the wall clock: the lag gauge must say so.
	if lag := gauge(t, reg, "abacus_processor_stream_time_lag_seconds"); lag < 24*3600 {
		t.Errorf("stream time lag %v s, want more than a day", lag)
	}
	if err := stop(); err != nil {
		t.Fatalf("processor run: %v", err)
	}
	end := endOffsets(ctx, t, brokers, topo.TotalsTopic())
	l := readTotals(ctx, t, brokers, topo.TotalsTopic(), func(l *totalsLog) bool { return int64(l.count) >= end })
	o.check(t, l)
	lateWant := 0
	for _, n := range o.late {
		lateWant += n
	}
	lateMetric := "abacus_processor_late_routed_total"
	if topo.LateTopic() == "" {
		lateMetric = "abacus_processor_late_dropped_total"
	}
	for _, c := range []struct {
		metric string
		want   int
	}{
		{"abacus_processor_events_in_total", len(insA)},
		{"abacus_processor_dead_lettered_total", o.future + o.bad},
		{lateMetric, lateWant},
		{"abacus_processor_duplicates_skipped_total", 0},
	} {
		if got := counter(t, reg, c.metric); got != float64(c.want) {
			t.Errorf("%s = %v, want %d", c.metric, got, c.want)
		}
	}
	if got := endOffsets(ctx, t, brokers, topo.DeadLetterTopic()); got != int64(o.future+o.bad) {
		t.Errorf("dead-letter topic holds %d records, want %d", got, o.future+o.bad)
	}
	t.Logf("phase 1: %d records, %d applied, %d final windows, late %v, future %d, undecodable %d, %d totals records",
		len(insA), o.applied, len(o.final), o.late, o.future, o.bad, l.count)
	if t.Failed() {
		return
	}

	// Phase 2: replay everything, then a second batch.
	lateA := lateWant
	resetOffsets(ctx, t, brokers, name, input, parts)
	insB := genInputs(2, 800, 20, baseTime+1500*200+10*60_000)
	if repartition {
		rekey(insB)
	}
	produce(ctx, t, brokers, input, insB)
	for _, in := range insB {
		o.feed(in)
	}
	o.idle()
	reg = prometheus.NewRegistry()
	// Prune as soon as possible: totals must not change, and every window must leave the table.
	pruneCfg := cfg(reg)
	pruneCfg.FinalRetention = time.Nanosecond
	stop = runProcessor(t, topo, pruneCfg)
	readTotals(ctx, t, brokers, topo.TotalsTopic(), o.hasAllFinals)
	for gauge(t, reg, "abacus_processor_windows_held") != 0 || gauge(t, reg, "abacus_processor_windows_open") != 0 {
		if ctx.Err() != nil {
			t.Fatalf("windows still in the table after every window closed: held %v, open %v",
				gauge(t, reg, "abacus_processor_windows_held"), gauge(t, reg, "abacus_processor_windows_open"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("processor run after rewind: %v", err)
	}
	end = endOffsets(ctx, t, brokers, topo.TotalsTopic())
	l = readTotals(ctx, t, brokers, topo.TotalsTopic(), func(l *totalsLog) bool { return int64(l.count) >= end })
	o.check(t, l)
	if got := counter(t, reg, "abacus_processor_duplicates_skipped_total"); got < float64(o.applied-len(insB)) {
		t.Errorf("duplicates skipped after rewind = %v, want at least %d", got, o.applied-len(insB))
	}
	// The replayed records of phase 1 are recognised, the late ones too (DESIGN invariant 12): only
	// the second batch's late events are late again.
	lateAll := 0
	for _, n := range o.late {
		lateAll += n
	}
	if got := counter(t, reg, lateMetric); got != float64(lateAll-lateA) {
		t.Errorf("%s after rewind = %v, want the second batch's %d", lateMetric, got, lateAll-lateA)
	}
	t.Logf("phase 2: %d more records, %d final windows in all, %v duplicates skipped", len(insB), len(o.final),
		counter(t, reg, "abacus_processor_duplicates_skipped_total"))
}

// TestScenarioKfake runs the oracle scenario against kfake, in process.
func TestScenarioKfake(t *testing.T) {
	runScenario(t, kfakeBrokers(t), false)
}

// TestScenarioRepartitionKfake runs the oracle scenario on kfake with record keys that are not
// the entity: events are re-keyed through the loop topic, and the rewind still dedups exactly.
func TestScenarioRepartitionKfake(t *testing.T) {
	runScenario(t, kfakeBrokers(t), true)
}

// rekey gives records keys unrelated to their entity.
func rekey(ins []input) {
	for i := range ins {
		ins[i].key = fmt.Sprintf("src-%d", i%7)
	}
}

// TestScenarioRealKafka runs the oracle scenario against the real Kafka broker of testenv.
func TestScenarioRealKafka(t *testing.T) {
	runScenario(t, testenv.Kafka(t), false)
}

// TestDriverMatchesBroker (DESIGN invariant 10): the in-memory driver gives the same totals as a processor
// group on the real broker, for the same records: every final total and every every-update total
// alike, the same late and dead-lettered records.
func TestDriverMatchesBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := uniqueName("match")
	input := name + "-in"
	createTopic(ctx, t, brokers, input, scenarioPartitions)
	topo := scenarioTopology(t, name, input, false)
	ins := genInputs(7, 1500, 20, baseTime)
	produce(ctx, t, brokers, input, ins)
	o := newOracle(scenarioPartitions)
	for _, in := range ins {
		o.feed(in)
	}
	o.idle()

	reg := prometheus.NewRegistry()
	stop := runProcessor(t, topo, processors.Config{Brokers: brokers, StoragePath: t.TempDir(), IdleTimeout: 3 * time.Second,
		TickInterval: 200 * time.Millisecond, Registerer: reg, Logger: testLogger(t)})
	readTotals(ctx, t, brokers, topo.TotalsTopic(), o.hasAllFinals)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	broker := outputsOf(ctx, t, brokers, topo)

	d := abacustest.New(t, topo, abacustest.Options{Partitions: scenarioPartitions, IdleTimeout: 3 * time.Second, Start: time.Now()})
	for _, in := range ins {
		d.Send(input, in.key, in.value, abacustest.At(time.Now()))
	}
	d.Advance(time.Minute)
	driver := map[string][]string{}
	for _, tot := range d.Totals() {
		driver["totals"] = append(driver["totals"], tot.String())
	}
	for _, r := range d.Late() {
		driver["late"] = append(driver["late"], r.Source.String()+" "+r.Set)
	}
	for _, r := range d.DeadLetters() {
		driver["dead"] = append(driver["dead"], r.Source.String()+" "+string(r.Reason))
	}
	for _, kind := range []string{"totals", "late", "dead"} {
		a, b := broker[kind], driver[kind]
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Errorf("%s: the broker gave %d, the driver %d; first differences:\n%s", kind, len(a), len(b), firstDiff(a, b))
		}
	}
}

// outputsOf reads a topology's totals, late and dead-letter topics as the driver shows them.
func outputsOf(ctx context.Context, t *testing.T, brokers []string, topo *topology.Topology) map[string][]string {
	out := map[string][]string{}
	end := endOffsets(ctx, t, brokers, topo.TotalsTopic())
	l := readTotals(ctx, t, brokers, topo.TotalsTopic(), func(l *totalsLog) bool { return int64(l.count) >= end })
	for _, r := range l.ordered {
		tot := abacustest.Total{Set: r.Set, Entity: r.Entity, Start: time.UnixMilli(r.Start), End: time.UnixMilli(r.End),
			Final: r.Final, Revision: r.Revision, Values: map[string]totals.Value{}}
		for _, v := range r.Values {
			tot.Values[v.Name] = v
		}
		out["totals"] = append(out["totals"], tot.String())
	}
	for kind, topic := range map[string]string{"late": topo.LateTopic(), "dead": topo.DeadLetterTopic()} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		want := endOffsets(ctx, t, brokers, topic)
		for n := int64(0); n < want; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			fs.EachRecord(func(rec *kgo.Record) {
				n++
				var hs []deadletter.Header
				for _, h := range rec.Headers {
					hs = append(hs, deadletter.Header{Key: h.Key, Value: h.Value})
				}
				r, err := deadletter.Parse(rec.Value, hs)
				if err != nil {
					t.Fatal(err)
				}
				if kind == "late" {
					out[kind] = append(out[kind], r.Source.String()+" "+r.Set)
				} else {
					out[kind] = append(out[kind], r.Source.String()+" "+string(r.Reason))
				}
			})
		}
		cl.Close()
	}
	return out
}

func firstDiff(a, b []string) string {
	var out []string
	for i := 0; i < max(len(a), len(b)) && len(out) < 6; i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("  broker %s\n  driver %s", x, y))
		}
	}
	return strings.Join(out, "\n")
}
