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
// Rollup sets (By, Global) run as in a processor group: each partition's partial totals go to the
// key's owner through the in-memory loop topic, and progress messages close the owner's windows;
// their finals are read like an entity's, with the rollup key in the entity's place
// (d.Final("fleet", topology.GlobalKey, start)). With Partitions above 1 a rollup's final waits,
// as it does on Kafka, for every partition to close the window: Advance past the idle timeout
// closes those that have no more events.
//
// RestartWith runs a new version of the topology, as a deployment does; RollOut restarts some
// partitions only with it, so that two versions run side by side and exchange partials, as in a
// rolling rollout.
//
// Kafka's part is simulated plainly: every message is acknowledged at once, records are processed
// in the order they are sent (re-keyed events and ticks after the record that caused them), and
// every processed record counts as committed, so Redeliver is how a test replays records.
package abacustest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/memtable"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/tables"
	"github.com/abacus-stream/abacus/topology"
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

	// engs and plans are, per partition, the engine (a processor instance) running it and the
	// version of the topology it runs: one engine for all after New and RestartWith, two or
	// more during a rolling rollout (RollOut).
	engs     []*engine.Engine
	plans    []*plan.Plan
	reg      *prometheus.Registry
	now      time.Time
	nextTick time.Time
	tickKeys []string

	logs      map[string][][]record // topic -> partition -> records (sources and the loop)
	tables    []*memtable.Table     // per partition
	lookups   *tables.Memory        // the topology's tables (topology.NewTable), by name
	changelog [][]change            // per partition, every write in order
	queue     []delivery
	out       []Message
	failed    error

	totals   []Total // decoded totals, in order, up to totalsAt of out
	finals   []Total // the final ones among them
	totalsAt int

	// done marks, per source topic and partition, the records processed: a stopping processor
	// waits for Kafka's acknowledgement of what they wrote, and commits them (committed).
	done map[string][][]bool

	// failReturns and durableErr stand for Kafka and goka failing, for the package's own tests:
	// SendDurable returns durableErr, and Fail returns instead of panicking (as goka's does once
	// its processor is stopping).
	failReturns bool
	durableErr  error

	sent     uint64   // messages the processor sent (state writes, totals, loop messages)
	sentLog  []uint64 // sent at each of the last deliveries, for AckLag
	ackedNow uint64
	durable  int // messages sent through SendDurable
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

// New starts a driver for topo; a bad option fails the test.
func New(t testing.TB, topo *topology.Topology, opts Options) *Driver {
	t.Helper()
	if plan.Of(topo) == nil {
		t.Fatal("abacustest.New: topology is nil or zero (make it with topology.Builder.Build)")
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
	d.lookups = tables.NewMemory(topo)
	for _, s := range d.plan.Sources {
		d.logs[s.Topic] = make([][]record, opts.Partitions)
	}
	d.logs[d.loopTopic()] = make([][]record, opts.Partitions)
	d.done = map[string][][]bool{}
	for range opts.Partitions {
		d.tables = append(d.tables, memtable.New())
		d.changelog = append(d.changelog, nil)
	}
	d.start(d.allPartitions())
	return d
}

// allPartitions lists the driver's partitions.
func (d *Driver) allPartitions() []int32 {
	ps := make([]int32, d.opts.Partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps
}

func (d *Driver) loopTopic() string { return plan.LoopTopic(d.plan.Name) }

// start builds a fresh engine over the tables of partitions, as a processor instance starting
// does, and gives it those partitions.
func (d *Driver) start(partitions []int32) {
	d.reg = prometheus.NewRegistry()
	eng, err := engine.New(d.plan, engine.Config{IdleTimeout: d.opts.IdleTimeout, FinalRetention: d.opts.FinalRetention,
		Registerer: d.reg, Logger: d.opts.Logger, Now: func() time.Time { return d.now }, Output: d.output, Durability: kafka{d},
		Tables: d.lookups.For(d.topo)})
	if err != nil {
		d.t.Fatalf("abacustest: %v", err)
	}
	if d.engs == nil {
		d.engs = make([]*engine.Engine, d.opts.Partitions)
		d.plans = make([]*plan.Plan, d.opts.Partitions)
	}
	eng.SetPartitions(d.opts.Partitions)
	for _, p := range partitions {
		eng.SetStorage(p, d.tables[p])
		d.engs[p], d.plans[p] = eng, d.plan
	}
}

// PutTable records a version of key in the table named name (topology.NewTable): value, which
// must be of the table's type, from validFrom on; a nil value deletes the key from validFrom on.
// It is as a record of the table's topic read by every instance at once: events processed after
// it see it at their event time, events processed before it saw the version before, and the
// versions outlive restarts (a processor keeps them in its versions topic).
func (d *Driver) PutTable(name, key string, value any, validFrom time.Time) {
	d.t.Helper()
	if err := d.lookups.For(d.topo).Put(name, key, validFrom, value); err != nil {
		d.t.Fatalf("abacustest: PutTable: %v", err)
	}
}

// Now is the driver's wall clock.
func (d *Driver) Now() time.Time { return d.now }

// Registry holds the processor's metrics (a fresh one after Restart; after RollOut, those of the
// instance it started).
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
	d.restart(topo, loseStorage, d.allPartitions())
}

// RollOut restarts the processor instance of the given partitions only, running topo, while the
// other partitions keep running the version they run: a rolling rollout, where old and new
// versions run side by side and send each other rollup partials. Each call is one instance
// (partitions moved back to an earlier version are a RollOut of that version). With loseStorage
// the partitions' tables are rebuilt from the changelog.
func (d *Driver) RollOut(topo *topology.Topology, loseStorage bool, partitions ...int32) {
	d.t.Helper()
	for _, p := range partitions {
		if p < 0 || int(p) >= d.opts.Partitions {
			d.t.Fatalf("abacustest: RollOut of partition %d: the driver has %d", p, d.opts.Partitions)
		}
	}
	d.restart(topo, loseStorage, partitions)
}

// restart starts an engine running topo for partitions, as RestartWith and RollOut do.
func (d *Driver) restart(topo *topology.Topology, loseStorage bool, partitions []int32) {
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
		for _, part := range partitions {
			st := memtable.New()
			for _, c := range d.changelog[part] {
				if c.value == nil {
					_ = st.Delete(c.key)
				} else {
					_ = st.Set(c.key, c.value)
				}
			}
			d.tables[part] = st
		}
	}
	d.start(partitions)
	// The group resumes each source partition after its committed records (engine.Engine.Resumed): a
	// processor stopped for a deployment waits for Kafka's acknowledgements and commits what it
	// processed.
	eng := d.engs[partitions[0]]
	for _, s := range p.Sources {
		for _, part := range partitions {
			from := d.committed(s.Topic, part)
			eng.Resumed(s.Topic, part, from)
			// Records not processed yet (of a source the earlier version did not have) come now.
			for o := from; o < int64(len(d.logs[s.Topic][part])); o++ {
				if !d.isDone(s.Topic, part, o) {
					d.queue = append(d.queue, delivery{s.Topic, part, o})
				}
			}
		}
	}
	d.drain() // a fresh processor rebuilds its partitions at their first record; make that now
	for _, part := range partitions {
		d.queue = append(d.queue, d.rebuildProbe(part))
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
