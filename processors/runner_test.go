package processors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/abacustest"
	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/partitioner/franz"
	"github.com/abacus-stream/abacus/processors"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

// runner runs one scenario of records, clock moves and restarts through a processor: the
// in-memory driver, or a real processor group on kfake or the real broker. The engine's behaviour
// is meant to be the same on all three, and these tests check it.
type runner interface {
	// send produces a record with the given timestamp and waits until the processor took it.
	send(topic, key string, value []byte, recordTime time.Time)
	// advance moves the wall clock and waits for the ticks that follow.
	advance(d time.Duration)
	// restart stops the processor cleanly (or loses its local storage, as a crash on another
	// machine does) and starts a new one of the same group.
	restart(lose bool)
	// restartWith restarts the group running another version of its topology, and returns the
	// error the new processor stops with, if it does.
	restartWith(topo *topology.Topology, lose bool) error
	finals() []abacustest.Total
	totals() []abacustest.Total
	deadLetters() []deadletter.Record
	late() []deadletter.Record
	counter(name string) float64
	gauge(name string) float64
	now() time.Time
	// putTable records a version of key in a table of the topology (topology.NewTable), valid
	// from validFrom (nil value: deleted from then), and waits until the processor read it.
	putTable(table, key string, value any, validFrom time.Time)
}

// runnerOptions are a scenario's processor settings.
type runnerOptions struct {
	partitions  int
	start       time.Time
	idleTimeout time.Duration
	// sources lists the source topics to create (names as the topology declares them).
	sources []string
	// topicsExist says another runner created the source and table topics already.
	topicsExist bool
}

// runners lists the runners a scenario runs on: always the driver; kfake and the real broker
// unless the test is short.
func runners(t *testing.T) map[string]func(*testing.T, *topology.Topology, runnerOptions) runner {
	rs := map[string]func(*testing.T, *topology.Topology, runnerOptions) runner{
		"driver": func(t *testing.T, topo *topology.Topology, o runnerOptions) runner {
			r := &driverRunner{t: t}
			r.d = abacustest.New(t, topo, abacustest.Options{Partitions: o.partitions, Start: o.start, IdleTimeout: o.idleTimeout,
				TickInterval: o.idleTimeout / 4, AckLag: 2, OnFail: func(err error) { r.failed = err }})
			return r
		},
	}
	if testing.Short() {
		return rs
	}
	rs["kfake"] = func(t *testing.T, topo *topology.Topology, o runnerOptions) runner {
		return newKafkaRunner(t, kfakeBrokers(t), topo, o)
	}
	rs["kafka"] = func(t *testing.T, topo *topology.Topology, o runnerOptions) runner {
		return newKafkaRunner(t, testenv.Kafka(t), topo, o)
	}
	return rs
}

// eachRunner runs a scenario on every runner, as subtests.
func eachRunner(t *testing.T, build func(t *testing.T) (*topology.Topology, runnerOptions), scenario func(t *testing.T, r runner, topo *topology.Topology)) {
	for _, name := range []string{"driver", "kfake", "kafka"} {
		mk, ok := runners(t)[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			topo, o := build(t)
			scenario(t, mk(t, topo, o), topo)
		})
	}
}

type driverRunner struct {
	d      *abacustest.Driver
	t      *testing.T
	failed error
	base   map[string]float64 // counters of earlier processors: each restart starts them over
}

// counted are the counters the scenarios read across restarts.
var counted = []string{"abacus_processor_events_in_total", "abacus_processor_windows_emitted_total", "abacus_processor_late_dropped_total", "abacus_processor_late_routed_total",
	"abacus_processor_dead_lettered_total", "abacus_processor_duplicates_skipped_total", "abacus_processor_user_code_panics_total"}

func (r *driverRunner) restartWith(topo *topology.Topology, lose bool) error {
	r.keepCounters()
	r.failed = nil
	r.d.RestartWith(topo, lose)
	return r.failed
}

func (r *driverRunner) keepCounters() {
	if r.base == nil {
		r.base = map[string]float64{}
	}
	for _, name := range counted {
		r.base[name] += counter(r.t, r.d.Registry(), name)
	}
}

func (r *driverRunner) send(topic, key string, value []byte, ts time.Time) {
	r.d.Send(topic, key, value, abacustest.At(ts))
}
func (r *driverRunner) advance(d time.Duration)          { r.d.Advance(d) }
func (r *driverRunner) restart(lose bool)                { r.keepCounters(); r.d.Restart(lose) }
func (r *driverRunner) finals() []abacustest.Total       { return r.d.Finals() }
func (r *driverRunner) totals() []abacustest.Total       { return r.d.Totals() }
func (r *driverRunner) deadLetters() []deadletter.Record { return r.d.DeadLetters() }
func (r *driverRunner) late() []deadletter.Record        { return r.d.Late() }
func (r *driverRunner) counter(name string) float64 {
	return r.base[name] + counter(r.t, r.d.Registry(), name)
}
func (r *driverRunner) gauge(name string) float64 { return gauge(r.t, r.d.Registry(), name) }
func (r *driverRunner) now() time.Time            { return r.d.Now() }
func (r *driverRunner) putTable(table, key string, value any, validFrom time.Time) {
	r.d.PutTable(table, key, value, validFrom)
}

// kafkaRunner runs a real processor group on Kafka with a wall clock of the test's own: ticks
// come every 20 ms of real time, but what they decide follows the test's clock.
type kafkaRunner struct {
	t       *testing.T
	brokers []string
	topo    *topology.Topology
	opts    runnerOptions
	group   string
	storage string
	cl      *kgo.Client

	mu    sync.Mutex
	clock time.Time

	reg  *prometheus.Registry
	stop func() error
	done chan error
	sent map[string]int // source topic -> records sent
	// previous runs' counters: metrics start over with each processor.
	base map[string]float64
	// beforeRestart, if set, runs while the processor is stopped in restartWith.
	beforeRestart func()
	// tablePuts counts the table records produced, which the processor must have read;
	// tableBase those produced before the processor started (its versions topic had them).
	tablePuts, tableBase int
}

// tableTopics are the topics of topo's tables.
func tableTopics(topo *topology.Topology) []string { return topo.TableTopics() }

// putTable produces the version to the table's topic (JSON, as the tests' tables decode it,
// stamped validFrom) and waits until the processor applied every table record produced.
func (r *kafkaRunner) putTable(table, key string, value any, validFrom time.Time) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b []byte
	if value != nil {
		var err error
		if b, err = json.Marshal(value); err != nil {
			r.t.Fatal(err)
		}
	}
	topics := tableTopics(r.topo)
	if len(topics) != 1 {
		r.t.Fatalf("putTable: the runner feeds one table, the topology reads %v", topics)
	}
	rec := &kgo.Record{Topic: topics[0], Key: []byte(key), Value: b, Timestamp: validFrom}
	if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
	r.tablePuts++
	for ctx.Err() == nil && counter(r.t, r.reg, "abacus_table_updates_total") < float64(r.tablePuts-r.tableBase) {
		time.Sleep(10 * time.Millisecond)
	}
	if ctx.Err() != nil {
		r.t.Fatalf("the processor did not read table record %d of %s", r.tablePuts, table)
	}
}

func newKafkaRunner(t *testing.T, brokers []string, topo *topology.Topology, o runnerOptions) *kafkaRunner {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range append(topo.SourceTopics(), tableTopics(topo)...) {
		if !o.topicsExist {
			createTopic(ctx, t, brokers, s, o.partitions)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(franz.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r := &kafkaRunner{t: t, brokers: brokers, topo: topo, opts: o, group: topo.Name(), storage: t.TempDir(), cl: cl,
		clock: o.start, sent: map[string]int{}, base: map[string]float64{}}
	r.startProcessor()
	r.waitRunning()
	t.Cleanup(func() {
		if r.stop != nil {
			r.stop()
		}
	})
	return r
}

func (r *kafkaRunner) now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clock
}

func (r *kafkaRunner) startProcessor() {
	r.reg = prometheus.NewRegistry()
	r.tableBase = r.tablePuts
	cfg := processors.Config{Brokers: r.brokers, Group: r.group, StoragePath: r.storage, IdleTimeout: r.opts.idleTimeout,
		TickInterval: 20 * time.Millisecond, Registerer: r.reg, Logger: testLogger(r.t), Now: r.now}
	p, err := processors.New(r.topo, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	r.done = done
	r.stop = func() error {
		cancel()
		return <-done
	}
}

func (r *kafkaRunner) restartWith(topo *topology.Topology, lose bool) error {
	r.t.Helper()
	for _, name := range counted {
		r.base[name] += counter(r.t, r.reg, name)
	}
	if err := r.stop(); err != nil {
		r.t.Fatalf("processor run: %v", err)
	}
	r.stop = nil
	if r.beforeRestart != nil {
		r.beforeRestart()
	}
	if lose {
		if err := os.RemoveAll(r.storage); err != nil {
			r.t.Fatal(err)
		}
	}
	r.topo = topo
	r.startProcessor()
	r.waitRunning()
	// A processor that refuses its state stops at once; one that takes it runs on.
	select {
	case err := <-r.done:
		r.stop = func() error { return nil }
		return err
	case <-time.After(3 * time.Second):
	}
	r.settle()
	return nil
}

func (r *kafkaRunner) send(topic, key string, value []byte, ts time.Time) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value, Timestamp: ts}).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
	r.sent[topic]++
	r.settle()
}

// settle waits until the processor took every record sent, and what they caused settled: nothing
// waits for an acknowledgement, every total, dead letter and late record the processor counted as
// written is in its topic, and the output topics stop growing for a few ticks.
func (r *kafkaRunner) settle() {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	want := 0
	for _, n := range r.sent {
		want += n
	}
	var last map[string]int64
	stable := 0
	behind := ""
	for stable < 5 {
		if time.Now().After(deadline) {
			r.t.Fatalf("processor did not settle: %v of %d records in, %v waiting; %s", r.counter("abacus_processor_events_in_total"), want, r.gauge("abacus_processor_waiting_for_acks"), behind)
		}
		time.Sleep(20 * time.Millisecond)
		if int(r.counter("abacus_processor_events_in_total")) < want || r.gauge("abacus_processor_waiting_for_acks") > 0 {
			stable = 0
			continue
		}
		ends := r.outputCounts()
		// Totals and set-aside records go out without waiting for Kafka: the topics can stay still
		// for a while (a busy machine) with some of them still on their way.
		if behind = r.behind(ends); ends == nil || behind != "" {
			stable = 0
			continue
		}
		if maps.Equal(ends, last) {
			stable++
		} else {
			stable, last = 0, ends
		}
	}
}

// written pairs each output topic with the counter of the records the processor wrote to it.
func (r *kafkaRunner) written() map[string]string {
	w := map[string]string{r.topo.TotalsTopic(): "abacus_processor_windows_emitted_total",
		r.topo.DeadLetterTopic(): "abacus_processor_dead_lettered_total"}
	if r.topo.LateTopic() != "" {
		w[r.topo.LateTopic()] = "abacus_processor_late_routed_total"
	}
	return w
}

// behind names an output topic that holds fewer records than the processors of this runner
// counted as written to it, or is "".
func (r *kafkaRunner) behind(ends map[string]int64) string {
	for topic, name := range r.written() {
		if n := r.counter(name); float64(ends[topic]) < n {
			return fmt.Sprintf("%s holds %d records, %v counted as written", topic, ends[topic], n)
		}
	}
	return ""
}

func (r *kafkaRunner) outputs() []string {
	out := []string{r.topo.TotalsTopic(), r.topo.DeadLetterTopic()}
	if r.topo.LateTopic() != "" {
		out = append(out, r.topo.LateTopic())
	}
	return out
}

// outputCounts is, per output topic, the sum of its partitions' end offsets (nil if Kafka did not
// answer).
func (r *kafkaRunner) outputCounts() map[string]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(r.cl).ListEndOffsets(ctx, r.outputs()...)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Topic] += o.Offset })
	return out
}

// advance moves the clock and waits until every partition handled three ticks after it: an idle
// advance is written at one, applied once acknowledged, and closes follow.
func (r *kafkaRunner) advance(d time.Duration) {
	r.t.Helper()
	before := r.tickCounts()
	r.mu.Lock()
	r.clock = r.clock.Add(d)
	r.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		after := r.tickCounts()
		done := len(after) > 0
		for p, n := range after {
			if n < before[p]+3 {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("ticks did not come: %v -> %v", before, after)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.settle()
}

// takeovers is how many partition takeovers the processor has timed.
func (r *kafkaRunner) takeovers() float64 {
	mfs, _ := r.reg.Gather()
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "abacus_processor_partition_takeover_seconds" {
			for _, m := range mf.GetMetric() {
				n += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return n
}

func (r *kafkaRunner) tickCounts() map[string]float64 {
	out := map[string]float64{}
	mfs, _ := r.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "abacus_processor_ticks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func (r *kafkaRunner) restart(lose bool) {
	r.t.Helper()
	for _, name := range counted {
		r.base[name] += counter(r.t, r.reg, name)
	}
	if err := r.stop(); err != nil {
		r.t.Fatalf("processor run: %v", err)
	}
	r.stop = nil
	if lose {
		if err := os.RemoveAll(r.storage); err != nil {
			r.t.Fatal(err)
		}
	}
	r.startProcessor()
	r.waitRunning()
	r.settle()
}

// waitRunning waits until the processor handles ticks on every partition: it joined its group
// and took its partitions over (rebuilding them), as a restarted processor has before the test's
// clock moves on.
func (r *kafkaRunner) waitRunning() {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	// The group is settled once every partition handled a few ticks with no takeover between:
	// a restarted member can be assigned twice in a row (on kfake, when the stopped member's
	// leave reaches the coordinator after the new member's join), and a partition taken over
	// again starts its idle timeout over, so a clock move made before it would close nothing
	// (TestUserCodePanicDeadLetters failed so once in CI).
	var since map[string]float64
	takeovers := -1.0
	for {
		n := 0
		ticks := r.tickCounts()
		for p, c := range ticks {
			if c >= 1 && (since == nil || c >= since[p]+3) {
				n++
			}
		}
		switch t := r.takeovers(); {
		case t != takeovers || since == nil && n >= r.opts.partitions:
			takeovers, since, n = t, ticks, 0 // count ticks from here
		case n >= r.opts.partitions:
			return
		}
		select {
		case err := <-r.done:
			r.done <- err
			return // stopped: restartWith reports it
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("processor did not take its %d partitions within a minute", r.opts.partitions)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *kafkaRunner) counter(name string) float64 { return r.base[name] + counter(r.t, r.reg, name) }
func (r *kafkaRunner) gauge(name string) float64   { return gauge(r.t, r.reg, name) }

// read consumes a topic from its start to its end now.
func (r *kafkaRunner) read(topic string) []*kgo.Record {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(r.cl).ListEndOffsets(ctx, topic)
	if err != nil {
		r.t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			r.t.Fatalf("read %s: %d of %d records: %v", topic, len(out), want, ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) { out = append(out, rec) })
	}
	return out
}

func (r *kafkaRunner) totals() []abacustest.Total {
	var out []abacustest.Total
	for _, rec := range r.read(r.topo.TotalsTopic()) {
		t, err := totals.Decode(rec.Value)
		if err != nil {
			r.t.Fatal(err)
		}
		tt := abacustest.Total{Set: t.Set, Entity: t.Entity, Start: time.UnixMilli(t.Start), End: time.UnixMilli(t.End),
			Final: t.Final, Revision: t.Revision, Values: map[string]totals.Value{}}
		for _, v := range t.Values {
			tt.Values[v.Name] = v
		}
		out = append(out, tt)
	}
	return out
}

func (r *kafkaRunner) finals() []abacustest.Total {
	var out []abacustest.Total
	for _, t := range r.totals() {
		if t.Final {
			out = append(out, t)
		}
	}
	return out
}

func (r *kafkaRunner) setAside(topic string) []deadletter.Record {
	var out []deadletter.Record
	for _, rec := range r.read(topic) {
		var hs []deadletter.Header
		for _, h := range rec.Headers {
			hs = append(hs, deadletter.Header{Key: h.Key, Value: h.Value})
		}
		d, err := deadletter.Parse(rec.Value, hs)
		if err != nil {
			r.t.Fatalf("%s: %v", topic, err)
		}
		if string(rec.Key) != d.Source.String() {
			r.t.Fatalf("%s record keyed %q, its source is %s", topic, rec.Key, d.Source)
		}
		out = append(out, d)
	}
	return out
}

func (r *kafkaRunner) deadLetters() []deadletter.Record { return r.setAside(r.topo.DeadLetterTopic()) }

func (r *kafkaRunner) late() []deadletter.Record {
	if r.topo.LateTopic() == "" {
		return nil
	}
	return r.setAside(r.topo.LateTopic())
}

// finalsOf returns the finals of one window, keyed by their printed form, to check that a window
// got exactly one final total.
func finalsOf(ts []abacustest.Total, set, entity string, start time.Time) []string {
	var out []string
	for _, t := range ts {
		if t.Final && t.Set == set && t.Entity == entity && t.Start.Equal(start) {
			out = append(out, t.String())
		}
	}
	return out
}

// finalWait is how long a test waits for a final it expects to have come.
const finalWait = 20 * time.Second

// awaited is get(), asked again every 50 ms for up to finalWait while it holds fewer than n
// items: the runner settles once its outputs stay still for a moment, and on a loaded machine the
// last of them (a rollup final through the loop topic, a dead letter waiting for its
// acknowledgement) can still be on its way then. What it holds is the caller's to check: a wrong
// or second item fails all the same.
func awaited[T any](n int, get func() []T) []T {
	got := get()
	for deadline := time.Now().Add(finalWait); len(got) < n && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		got = get()
	}
	return got
}

// oneFinal fails unless the window got final totals that all agree, and returns it.
func oneFinal(t *testing.T, r runner, set, entity string, start time.Time) abacustest.Total {
	t.Helper()
	var fs []abacustest.Total
	got := awaited(1, func() []string {
		fs = r.finals()
		return finalsOf(fs, set, entity, start)
	})
	if len(got) == 0 {
		t.Fatalf("no final of %s/%s at %s; finals: %v", set, entity, start.UTC().Format(time.RFC3339Nano), fs)
	}
	for _, g := range got[1:] {
		if g != got[0] {
			t.Fatalf("two different finals of %s/%s at %s:\n  %s\n  %s", set, entity, start.UTC().Format(time.RFC3339Nano), got[0], g)
		}
	}
	for _, f := range fs {
		if f.String() == got[0] {
			return f
		}
	}
	panic("unreachable")
}

// uniqueTopology names a topology (and so its group and topics) for one test run.
func uniqueTopology(t *testing.T, prefix string) string {
	name := []byte(filepath.Base(t.Name()))
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			name[i] = '-'
		}
	}
	return fmt.Sprintf("%s-%s-%d", prefix, name, time.Now().UnixNano())
}
