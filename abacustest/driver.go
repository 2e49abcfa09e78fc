// Package abacustest runs a topology in memory, for tests of users' topology code: feed events,
// move the wall clock, read the totals, late records and dead letters that came out, restart the
// processor, all with no broker, no network and no sleeping.
//
// It runs the processor's own engine (the same code a processor group runs on Kafka: windows,
// grace, lateness, idle partitions, early firings, deduplication, dead letters), in one goroutine,
// over partitions in memory, so the same test gives the same output every time.
//
//	d := abacustest.New(t, topo, abacustest.Options{})
//	d.Pipe("readings", "dev-1", Reading{Device: "dev-1", TS: t0, Temp: 20})
//	d.Pipe("readings", "dev-1", Reading{Device: "dev-1", TS: t0 + 61_000, Temp: 22})
//	d.Final("minute", "dev-1", time.UnixMilli(t0)).Expect(t, map[string]float64{"count": 1, "max_temp": 20})
//
// Kafka's part is simulated plainly: every message is acknowledged at once, records are processed
// in the order they are sent (re-keyed events and ticks after the record that caused them), and
// every processed record counts as committed, so Redeliver is how a test replays records.
package abacustest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

// Options configure a Driver; zero fields take the processor's defaults.
type Options struct {
	// Partitions of every source topic (default 4). Keys go to partitions as goka's partitioner
	// sends them.
	Partitions int
	// Start is the wall clock when the test begins (default 2026-01-01T00:00:00Z).
	Start time.Time
	// IdleTimeout, TickInterval and FinalRetention are the processor's (defaults 1 minute,
	// IdleTimeout/4, 1 minute).
	IdleTimeout    time.Duration
	TickInterval   time.Duration
	FinalRetention time.Duration
	// AckLag delays Kafka's acknowledgement of the processor's messages by this many record
	// deliveries (default 0: every message is acknowledged at once). With a lag, closes wait for
	// their state to be acknowledged and idle advances for the partition's record, as on a
	// real broker, still deterministically.
	AckLag int
	// Logger receives the engine's logs (default: none).
	Logger *slog.Logger
	// OnFail, if set, is told when the processor stops on an error (corrupt state, a topology
	// change it refuses) instead of the test failing; the driver then takes no more records.
	OnFail func(error)
}

// Driver runs one topology in memory. It is not safe for concurrent use.
type Driver struct {
	t    testing.TB
	topo *topology.Topology
	plan *plan.Plan
	opts Options

	eng      *engine.Engine
	reg      *prometheus.Registry
	now      time.Time
	nextTick time.Time
	tickKeys []string

	logs      map[string][][]record // topic -> partition -> records (sources and the loop)
	tables    []*memStorage         // per partition
	changelog [][]change            // per partition, every write in order
	queue     []delivery
	out       []Message
	failed    error

	totals   []Total // decoded totals, in order, up to totalsAt of out
	finals   []Total // the final ones among them
	totalsAt int

	sent     uint64   // messages the processor sent (state writes, totals, loop messages)
	sentLog  []uint64 // sent at each of the last deliveries, for AckLag
	ackedNow uint64
	durable  int // messages sent through SendDurable
}

// kafka is the driver's Kafka as the engine sees it (engine.Durability and engine.DurableSender):
// messages are acknowledged AckLag deliveries after they were sent. It is not the Driver's own
// API, which users would see.
type kafka struct{ d *Driver }

// Sent implements engine.Durability.
func (k kafka) Sent() uint64 { return k.d.sent }

// Acknowledged implements engine.Durability.
func (k kafka) Acknowledged() uint64 { return k.d.ackedNow }

// delivered moves acknowledgements on by one delivery.
func (d *Driver) delivered() {
	if d.opts.AckLag <= 0 {
		d.ackedNow = d.sent
		return
	}
	d.sentLog = append(d.sentLog, d.sent)
	if len(d.sentLog) > d.opts.AckLag {
		d.ackedNow = max(d.ackedNow, d.sentLog[len(d.sentLog)-1-d.opts.AckLag])
		d.sentLog = d.sentLog[1:]
	}
}

// SendDurable implements engine.DurableSender: the processor sends such a message through a
// producer of its own and waits for Kafka's acknowledgement; here it is output at once, acknowledged,
// and not counted among the messages AckLag delays.
func (k kafka) SendDurable(topic, key string, value []byte, headers goka.Headers) error {
	k.d.durable++
	k.d.record(topic, key, value, headers)
	return nil
}

// record is one record of an in-memory topic.
type record struct {
	key     string
	value   []byte
	ts      time.Time
	headers goka.Headers
}

type change struct {
	key   string
	value []byte // nil: deleted
}

type delivery struct {
	topic     string
	partition int32
	offset    int64
}

const loopSuffix = "-loop"

// New starts a driver for topo; a bad option fails the test.
func New(t testing.TB, topo *topology.Topology, opts Options) *Driver {
	t.Helper()
	if topo == nil {
		t.Fatal("abacustest.New: topology is nil")
	}
	if opts.Partitions <= 0 {
		opts.Partitions = 4
	}
	if opts.Start.IsZero() {
		opts.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = engine.DefaultIdleTimeout
	}
	if opts.TickInterval <= 0 {
		opts.TickInterval = engine.DefaultTickInterval(opts.IdleTimeout)
	}
	if opts.FinalRetention <= 0 {
		opts.FinalRetention = engine.DefaultFinalRetention
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{t: t, topo: topo, plan: plan.Of(topo), opts: opts, now: opts.Start,
		nextTick: opts.Start.Add(opts.TickInterval), tickKeys: engine.TickKeys(opts.Partitions),
		logs: map[string][][]record{}}
	for _, s := range d.plan.Sources {
		d.logs[s.Topic] = make([][]record, opts.Partitions)
	}
	d.logs[d.loopTopic()] = make([][]record, opts.Partitions)
	for range opts.Partitions {
		d.tables = append(d.tables, newMemStorage())
		d.changelog = append(d.changelog, nil)
	}
	d.start()
	return d
}

func (d *Driver) loopTopic() string { return d.plan.Name + loopSuffix }

// start builds a fresh engine over the driver's tables, as a processor starting does.
func (d *Driver) start() {
	d.reg = prometheus.NewRegistry()
	eng, err := engine.New(d.plan, engine.Config{IdleTimeout: d.opts.IdleTimeout, FinalRetention: d.opts.FinalRetention,
		Registerer: d.reg, Logger: d.opts.Logger, Now: func() time.Time { return d.now }, Output: d.output, Durability: kafka{d}})
	if err != nil {
		d.t.Fatalf("abacustest: %v", err)
	}
	d.eng = eng
	eng.SetPartitions(d.opts.Partitions)
	for p, st := range d.tables {
		eng.SetStorage(int32(p), st)
	}
}

// Now is the driver's wall clock.
func (d *Driver) Now() time.Time { return d.now }

// Registry holds the processor's metrics (a fresh one after Restart).
func (d *Driver) Registry() *prometheus.Registry { return d.reg }

// RecordOption sets a property of a record sent.
type RecordOption func(*sendOptions)

type sendOptions struct {
	ts        time.Time
	partition int32
	headers   goka.Headers
}

// At sets the record's timestamp (default: the driver's wall clock, as a producer's create time).
func At(ts time.Time) RecordOption { return func(o *sendOptions) { o.ts = ts } }

// ToPartition sends the record to a partition of the driver's choosing instead of the key's.
func ToPartition(p int32) RecordOption { return func(o *sendOptions) { o.partition = p } }

// WithHeaders sets the record's headers.
func WithHeaders(h map[string][]byte) RecordOption {
	return func(o *sendOptions) { o.headers = goka.Headers(h) }
}

// Send produces a raw record to a source topic and processes it, with everything it causes
// (re-keyed events, closes).
func (d *Driver) Send(topic, key string, value []byte, opts ...RecordOption) {
	d.t.Helper()
	parts, ok := d.logs[topic]
	if !ok || topic == d.loopTopic() {
		d.t.Fatalf("abacustest: %q is not a source topic of topology %s (it has %v)", topic, d.plan.Name, d.topo.SourceTopics())
	}
	o := sendOptions{ts: d.now, partition: -1}
	for _, f := range opts {
		f(&o)
	}
	p := o.partition
	if p < 0 {
		p = partitioner.Partition([]byte(key), int32(d.opts.Partitions))
	}
	if int(p) >= len(parts) {
		d.t.Fatalf("abacustest: partition %d of %s: the driver has %d", p, topic, len(parts))
	}
	parts[p] = append(parts[p], record{key: key, value: value, ts: o.ts, headers: o.headers})
	d.queue = append(d.queue, delivery{topic, p, int64(len(parts[p]) - 1)})
	d.drain()
}

// Pipe encodes an event with its source's codec and sends it (Send).
func (d *Driver) Pipe(topic, key string, event any, opts ...RecordOption) {
	d.t.Helper()
	src := d.plan.SourceByTopic(topic)
	if src == nil {
		d.t.Fatalf("abacustest: %q is not a source topic of topology %s (it has %v)", topic, d.plan.Name, d.topo.SourceTopics())
	}
	b, err := src.Encode(event)
	if err != nil {
		d.t.Fatalf("abacustest: encode %T for %s: %v", event, topic, err)
	}
	d.Send(topic, key, b, opts...)
}

// Advance moves the wall clock by dt, sending every partition the ticks the processor would send
// meanwhile (one each TickInterval), so that idle partitions close their windows and closed
// windows leave the table exactly as in a running processor.
func (d *Driver) Advance(dt time.Duration) {
	d.t.Helper()
	end := d.now.Add(dt)
	for !d.nextTick.After(end) {
		d.now = d.nextTick
		d.Tick()
		d.nextTick = d.nextTick.Add(d.opts.TickInterval)
	}
	d.now = end
}

// Tick sends every partition one tick now.
func (d *Driver) Tick() {
	d.t.Helper()
	loop := d.logs[d.loopTopic()]
	for p, k := range d.tickKeys {
		loop[p] = append(loop[p], record{key: k, value: engine.TickMessage(), ts: d.now})
		d.queue = append(d.queue, delivery{d.loopTopic(), int32(p), int64(len(loop[p]) - 1)})
	}
	d.drain()
}

// Redeliver processes again the records of a source topic's partition from an offset on, as a
// processor that restarts before committing them does. Records it already applied are
// recognised and not counted twice.
func (d *Driver) Redeliver(topic string, partition int32, from int64) {
	d.t.Helper()
	parts, ok := d.logs[topic]
	if !ok || int(partition) >= len(parts) {
		d.t.Fatalf("abacustest: no partition %d of %s", partition, topic)
	}
	for o := from; o < int64(len(parts[partition])); o++ {
		d.queue = append(d.queue, delivery{topic, partition, o})
	}
	d.drain()
}

// Restart stops the processor and starts a new one, as a deployment does. With loseStorage the
// local tables are lost and rebuilt from the changelog, as after a crash or on another machine;
// otherwise they are kept, as after a clean stop.
func (d *Driver) Restart(loseStorage bool) { d.RestartWith(d.topo, loseStorage) }

// RestartWith restarts the processor (as Restart) running another version of the topology: sets
// and aggregations added, removed or reordered keep the state of those that stay.
func (d *Driver) RestartWith(topo *topology.Topology, loseStorage bool) {
	d.t.Helper()
	p := plan.Of(topo)
	if p.Name != d.plan.Name {
		d.t.Fatalf("abacustest: topology %s is not %s: a processor group runs one topology", p.Name, d.plan.Name)
	}
	d.topo, d.plan, d.failed = topo, p, nil
	for _, s := range p.Sources {
		if d.logs[s.Topic] == nil {
			d.logs[s.Topic] = make([][]record, d.opts.Partitions)
		}
	}
	if loseStorage {
		for p, changes := range d.changelog {
			st := newMemStorage()
			for _, c := range changes {
				if c.value == nil {
					_ = st.Delete(c.key)
				} else {
					_ = st.Set(c.key, c.value)
				}
			}
			d.tables[p] = st
		}
	}
	d.start()
	d.drain() // a fresh processor rebuilds its partitions at their first record; make that now
	for p := range d.tables {
		d.queue = append(d.queue, d.rebuildProbe(int32(p)))
	}
	d.drain()
}

// rebuildProbe is a tick to one partition: the first callback after a start rebuilds the
// partition from its table (and refuses a topology it cannot read) before any record.
func (d *Driver) rebuildProbe(p int32) delivery {
	loop := d.logs[d.loopTopic()]
	loop[p] = append(loop[p], record{key: d.tickKeys[p], value: engine.TickMessage(), ts: d.now})
	return delivery{d.loopTopic(), p, int64(len(loop[p]) - 1)}
}

// drain processes queued deliveries, and what they cause, until none is left.
func (d *Driver) drain() {
	d.t.Helper()
	if d.failed != nil && d.opts.OnFail != nil {
		d.queue = nil
		return
	}
	for len(d.queue) > 0 && d.failed == nil {
		dl := d.queue[0]
		d.queue = d.queue[1:]
		d.deliver(dl)
		d.delivered()
	}
	if d.failed != nil {
		if d.opts.OnFail != nil {
			d.opts.OnFail(d.failed)
			d.queue = nil
			return
		}
		d.t.Fatalf("abacustest: the processor stopped: %v", d.failed)
	}
}

func (d *Driver) deliver(dl delivery) {
	r := d.logs[dl.topic][dl.partition][dl.offset]
	ctx := &fakeContext{d: d, topic: dl.topic, partition: dl.partition, offset: dl.offset, rec: r}
	cb := d.eng.LoopCallback()
	if dl.topic != d.loopTopic() {
		for i, s := range d.plan.Sources {
			if s.Topic == dl.topic {
				cb = d.eng.SourceCallback(i)
			}
		}
	}
	defer func() {
		if x := recover(); x != nil {
			var f failure
			if errors.As(asError(x), &f) {
				d.failed = f.err
				return
			}
			panic(x)
		}
	}()
	cb(ctx, r.value)
}

func asError(x any) error {
	if err, ok := x.(error); ok {
		return err
	}
	return nil
}

// failure is how the fake context's Fail leaves the callback, as goka's does.
type failure struct{ err error }

func (f failure) Error() string { return f.err.Error() }

// output takes every message the engine emits.
func (d *Driver) output(_ goka.Context, topic, key string, value []byte, headers goka.Headers) {
	d.sent++
	d.record(topic, key, value, headers)
}

// record keeps a message the engine emitted.
func (d *Driver) record(topic, key string, value []byte, headers goka.Headers) {
	m := Message{Topic: topic, Key: key, Value: value}
	for k, v := range headers {
		m.Headers = append(m.Headers, deadletter.Header{Key: k, Value: v})
	}
	slices.SortFunc(m.Headers, func(a, b deadletter.Header) int { return strings.Compare(a.Key, b.Key) })
	d.out = append(d.out, m)
}

// Message is a message the processor emitted.
type Message struct {
	Topic   string
	Key     string
	Value   []byte
	Headers []deadletter.Header
}

// Messages are every message the processor emitted to topic, in order.
func (d *Driver) Messages(topic string) []Message {
	var out []Message
	for _, m := range d.out {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// fakeContext is goka.Context over the driver's topics and tables.
type fakeContext struct {
	d         *Driver
	topic     string
	partition int32
	offset    int64
	rec       record
}

func (c *fakeContext) Topic() goka.Stream       { return goka.Stream(c.topic) }
func (c *fakeContext) Key() string              { return c.rec.key }
func (c *fakeContext) Partition() int32         { return c.partition }
func (c *fakeContext) Offset() int64            { return c.offset }
func (c *fakeContext) Group() goka.Group        { return goka.Group(c.d.plan.Name) }
func (c *fakeContext) Headers() goka.Headers    { return c.rec.headers }
func (c *fakeContext) Timestamp() time.Time     { return c.rec.ts }
func (c *fakeContext) Context() context.Context { return context.Background() }
func (c *fakeContext) DeferCommit() func(error) { return func(error) {} }
func (c *fakeContext) Fail(err error)           { panic(failure{err}) }

func (c *fakeContext) Value() any {
	b, _ := c.d.tables[c.partition].Get(c.rec.key)
	if b == nil {
		return nil
	}
	v, err := state.Codec{}.Decode(b)
	if err != nil {
		c.Fail(fmt.Errorf("decode table value of %q: %w", c.rec.key, err))
	}
	return v
}

func (c *fakeContext) SetValue(v any, _ ...goka.ContextOption) {
	b, err := state.Codec{}.Encode(v)
	if err != nil {
		c.Fail(err)
	}
	_ = c.d.tables[c.partition].Set(c.rec.key, b)
	c.d.changelog[c.partition] = append(c.d.changelog[c.partition], change{c.rec.key, b})
	c.d.sent++
}

func (c *fakeContext) Delete(_ ...goka.ContextOption) {
	_ = c.d.tables[c.partition].Delete(c.rec.key)
	c.d.changelog[c.partition] = append(c.d.changelog[c.partition], change{key: c.rec.key})
	c.d.sent++
}

func (c *fakeContext) Emit(topic goka.Stream, key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	c.d.output(c, string(topic), key, b, nil)
}

func (c *fakeContext) Loopback(key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	loop := c.d.logs[c.d.loopTopic()]
	p := partitioner.Partition([]byte(key), int32(len(loop)))
	loop[p] = append(loop[p], record{key: key, value: b, ts: c.d.now})
	c.d.queue = append(c.d.queue, delivery{c.d.loopTopic(), p, int64(len(loop[p]) - 1)})
	c.d.sent++
}

func (c *fakeContext) Join(goka.Table) any {
	c.Fail(errors.New("abacustest: Join is not used by abacus"))
	return nil
}

func (c *fakeContext) Lookup(goka.Table, string) any {
	c.Fail(errors.New("abacustest: Lookup is not used by abacus"))
	return nil
}

var _ goka.Context = (*fakeContext)(nil)

// Total is a window total the processor emitted.
type Total struct {
	Set      string
	Entity   string
	Start    time.Time
	End      time.Time
	Final    bool
	Revision uint64
	Values   map[string]totals.Value
}

// Totals are every window total emitted, in order: early and every-update firings and finals.
func (d *Driver) Totals() []Total {
	d.t.Helper()
	d.decodeTotals()
	return slices.Clone(d.totals)
}

// decodeTotals decodes the totals emitted since the last call: a test that asks after every
// record must not decode the whole output each time.
func (d *Driver) decodeTotals() {
	d.t.Helper()
	// Grown once for what is pending: appending hundreds of thousands of totals one by one copied
	// them again at every doubling, a third of the allocations of BenchmarkDriver100k.
	d.totals = slices.Grow(d.totals, len(d.out)-d.totalsAt)
	first := len(d.totals)
	for ; d.totalsAt < len(d.out); d.totalsAt++ {
		m := d.out[d.totalsAt]
		if m.Topic != d.plan.TotalsTopic {
			continue
		}
		r, err := totals.Decode(m.Value)
		if err != nil {
			d.t.Fatalf("abacustest: totals record: %v", err)
		}
		t := Total{Set: r.Set, Entity: r.Entity, Start: time.UnixMilli(r.Start), End: time.UnixMilli(r.End),
			Final: r.Final, Revision: r.Revision, Values: make(map[string]totals.Value, len(r.Values))}
		for _, v := range r.Values {
			t.Values[v.Name] = v
		}
		d.totals = append(d.totals, t)
	}
	// The finals are taken from the new totals in one pass, with their count known.
	nf := 0
	for _, t := range d.totals[first:] {
		if t.Final {
			nf++
		}
	}
	d.finals = slices.Grow(d.finals, nf)
	for _, t := range d.totals[first:] {
		if t.Final {
			d.finals = append(d.finals, t)
		}
	}
}

// Finals are the final totals emitted, in order.
func (d *Driver) Finals() []Total {
	d.t.Helper()
	d.decodeTotals()
	return slices.Clone(d.finals)
}

// FinalsOf are the final totals of one entity in one set, by window start.
func (d *Driver) FinalsOf(set, entity string) []Total {
	var out []Total
	for _, t := range d.Finals() {
		if t.Set == set && t.Entity == entity {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, func(a, b Total) int { return a.Start.Compare(b.Start) })
	return out
}

// Final is the final total of one window; it fails the test if there is none, or if two that
// differ were emitted (a window has one final total, whatever happens).
func (d *Driver) Final(set, entity string, start time.Time) Total {
	d.t.Helper()
	var found []Total
	for _, t := range d.FinalsOf(set, entity) {
		if t.Start.Equal(start) {
			found = append(found, t)
		}
	}
	if len(found) == 0 {
		var starts []string
		for _, t := range d.FinalsOf(set, entity) {
			starts = append(starts, t.Start.UTC().Format(time.RFC3339Nano))
		}
		d.t.Fatalf("abacustest: no final total of %s/%s for the window at %s (finals at %v)", set, entity, start.UTC().Format(time.RFC3339Nano), starts)
	}
	for _, t := range found[1:] {
		if t.String() != found[0].String() {
			d.t.Fatalf("abacustest: two different finals of %s/%s at %s:\n  %s\n  %s", set, entity, start.UTC().Format(time.RFC3339Nano), found[0], t)
		}
	}
	return found[0]
}

// Float is a value as a number (totals.Value.Number: ints and floats as they are, quantiles the
// one nearest the median, bytes NaN), 0 when the total has no such value.
func (t Total) Float(name string) float64 {
	v, ok := t.Values[name]
	if !ok {
		return 0
	}
	return v.Number()
}

// String shows the total in one line.
func (t Total) String() string {
	names := make([]string, 0, len(t.Values))
	for n := range t.Values {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s [%s, %s) final=%v rev=%d", t.Set, t.Entity, t.Start.UTC().Format(time.RFC3339Nano), t.End.UTC().Format(time.RFC3339Nano), t.Final, t.Revision)
	for _, n := range names {
		v := t.Values[n]
		switch v.Kind {
		case totals.KindInt:
			fmt.Fprintf(&b, " %s=%d", n, v.Int)
		case totals.KindFloat:
			fmt.Fprintf(&b, " %s=%g", n, v.Float)
		case totals.KindQuantiles:
			fmt.Fprintf(&b, " %s=%v", n, v.Quantiles)
		default:
			fmt.Fprintf(&b, " %s=%x", n, v.Bytes)
		}
	}
	return b.String()
}

// Expect fails the test unless every named value is as wanted (ints and floats as numbers),
// saying which differ.
func (t Total) Expect(tb testing.TB, want map[string]float64) {
	tb.Helper()
	var diffs []string
	for name, w := range want {
		if _, ok := t.Values[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want %g)", name, w))
			continue
		}
		if got := t.Float(name); got != w {
			diffs = append(diffs, fmt.Sprintf("%s = %g, want %g", name, got, w))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		tb.Fatalf("%s:\n  %s", t, strings.Join(diffs, "\n  "))
	}
}

// DeadLetters are the dead-letter records emitted, in order.
func (d *Driver) DeadLetters() []deadletter.Record { return d.setAside(d.plan.DeadLetter) }

// Late are the late records emitted, in order (none when the topology has no late topic).
func (d *Driver) Late() []deadletter.Record {
	if d.plan.LateTopic == "" {
		return nil
	}
	return d.setAside(d.plan.LateTopic)
}

func (d *Driver) setAside(topic string) []deadletter.Record {
	d.t.Helper()
	var out []deadletter.Record
	for _, m := range d.Messages(topic) {
		r, err := deadletter.Parse(m.Value, m.Headers)
		if err != nil {
			d.t.Fatalf("abacustest: record of %s: %v", topic, err)
		}
		out = append(out, r)
	}
	return out
}

// Window is an entity's window as the processor holds it.
type Window struct {
	Start, End time.Time
	Revision   uint64
	Values     map[string]totals.Value
}

// Windows are the windows of an entity in a set that the processor holds (open ones, and closed
// ones not dropped yet), by start.
func (d *Driver) Windows(set, entity string) []Window {
	d.t.Helper()
	s := d.plan.SetByName(set)
	if s == nil {
		d.t.Fatalf("abacustest: topology %s has no aggregate set %q (it has %v)", d.plan.Name, set, d.topo.SetNames())
	}
	p := partitioner.Partition([]byte(entity), int32(d.opts.Partitions))
	b, _ := d.tables[p].Get(entity)
	if b == nil {
		return nil
	}
	ent, err := state.Decode(b)
	if err != nil {
		d.t.Fatalf("abacustest: state of %q: %v", entity, err)
	}
	var out []Window
	for _, w := range ent.Windows {
		if w.Set != s.Index {
			continue
		}
		win := Window{Start: time.UnixMilli(w.Start), End: time.UnixMilli(w.End), Revision: w.Revision, Values: map[string]totals.Value{}}
		for k, a := range s.Aggs {
			if k >= len(w.Aggs) {
				break
			}
			acc, err := a.Decode(w.Aggs[k])
			if err != nil {
				d.t.Fatalf("abacustest: %s window of %q: %v", set, entity, err)
			}
			v := acc.Value()
			v.Name = a.Name
			win.Values[a.Name] = v
		}
		out = append(out, win)
	}
	slices.SortFunc(out, func(a, b Window) int { return a.Start.Compare(b.Start) })
	return out
}

// Entities is the number of entities in the processor's tables.
func (d *Driver) Entities() int {
	n := 0
	for _, st := range d.tables {
		for k := range st.m {
			if !plan.ReservedKey(k) {
				n++
			}
		}
	}
	return n
}

// Unwrap returns the error the processor failed with.
func (f failure) Unwrap() error { return f.err }

// Fences is the number of source positions the processor remembers for an entity (what keeps
// replays from counting twice): it follows the sources the entity's open windows may still get
// replayed records from.
func (d *Driver) Fences(entity string) int {
	d.t.Helper()
	p := partitioner.Partition([]byte(entity), int32(d.opts.Partitions))
	b, _ := d.tables[p].Get(entity)
	if b == nil {
		return 0
	}
	ent, err := state.Decode(b)
	if err != nil {
		d.t.Fatalf("abacustest: state of %q: %v", entity, err)
	}
	return len(ent.Fences)
}
