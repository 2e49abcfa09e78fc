// Package processors runs a topology as a goka processor group: it consumes the sources, keeps
// each entity's windows in the group table (state.Entity), closes windows as stream time passes
// their end plus grace, and writes absolute window totals (package totals) to the totals topic.
//
// It must never apply a source record to an entity twice (every entity keeps an offset fence per
// source partition), never read event time from a clock, and never write anywhere but Kafka: the
// sinks turn totals into HBase cells on their own consumers.
//
// # Closing windows
//
// goka calls back only for keys that receive messages, so an entity whose events stop would never
// see its windows close. Each partition keeps, in memory, the next close time of every entity that
// has windows (a min-heap), rebuilt from the partition's local table at the first callback after
// an assignment. Whatever callback advances the partition's stream time (the largest accepted
// event time seen) past an entity's next close reads that entity's state from the local table and
// emits the final totals of its closed windows; no message and no write per close. A window's
// content is fixed by stream time at the moment it closes (later events are late), so the totals
// do not depend on timing.
//
// A closed window stays in the table for Config.FinalRetention after its final total was
// emitted, then goes at the entity's next write, or through a close message sent to it through
// the loop topic when it has no more events. Until then a crash cannot lose the final total: the
// rebuilt partition finds the window closed and emits it again (an identical record).
//
// A periodic tick, sent to every partition through the loop topic, lets a partition that received
// no event for Config.IdleTimeout advance its stream time to the wall clock (never beyond the last
// close time it waits for), so idle partitions and idle streams still emit their final totals.
//
// # Replays
//
// Every entity keeps, per source partition, the highest offset it applied; a replayed record is
// skipped, its state written again (the local table may be ahead of the changelog) and, for sets
// that emit every update, its windows' current totals re-sent. After a run that did not end
// cleanly the local tables are discarded and rebuilt from the changelog, the one copy that is a
// consistent prefix of the partition's history; the stream time rebuilt from it is then exactly
// the one the replay resumes from, so replayed events are judged late or on time as before.
//
// goka commits a message's offset as soon as that message's own writes are acknowledged, so on a
// cluster of several brokers a later message can commit past an earlier one whose writes are
// still in flight. The changelog of a partition is one Kafka partition, written in order, so state
// stays a prefix; final totals survive because closed windows stay FinalRetention and a rebuilt
// partition emits them again. Two things can be lost there and are only proven exact on one
// broker (where one connection carries every write in order): non-final totals (early or
// every-update firings, which the final supersedes), and events re-keyed through the loop topic
// (Source.Repartition).
package processors

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// Header names on dead-letter and late records.
const (
	HeaderReason = "abacus-reason" // why the record left the pipeline
	HeaderSource = "abacus-source" // topic/partition/offset of the original record
	HeaderSet    = "abacus-set"    // aggregate set an event was late for
)

// Config says where and how to run a topology. The zero value plus Brokers is usable; see
// EnsureDefaults.
type Config struct {
	// Brokers are the Kafka seed brokers.
	Brokers []string
	// Group is the goka group (default: the topology name). Its table is <group>-table, its loop
	// topic <group>-loop.
	Group string
	// StoragePath is the folder of the local LevelDB tables (default $TMPDIR/abacus/<group>).
	StoragePath string
	// Replication is the replication factor of the topics the processor creates (default 1: set
	// it to 3 on a production cluster).
	Replication int
	// IdleTimeout is how long a partition may receive no events before its stream time advances
	// with the wall clock to close its windows (default 1 minute).
	IdleTimeout time.Duration
	// TickInterval is how often every partition is sent a tick (default IdleTimeout/4).
	// FinalRetention is how long (wall clock) a closed window stays in the table after its final
	// total was emitted (default 1 minute). goka writes the local table at once but Kafka
	// acknowledges emitted totals later; if the process dies in between, the rebuilt partition
	// must find the window to emit its final total again. It must exceed the producer's
	// worst-case time to acknowledge or fail a message.
	FinalRetention time.Duration
	TickInterval   time.Duration
	// LoopRetention is the retention of the loop topic, which carries re-keyed events and close
	// messages: it must exceed any outage (default 7 days).
	LoopRetention time.Duration
	// KafkaVersion is the protocol version sarama speaks (default V2_8_0_0).
	KafkaVersion sarama.KafkaVersion
	// Registerer receives the processor's metrics (default: a private registry, so nothing is
	// exported; pass the registry you serve).
	Registerer prometheus.Registerer
	// Logger receives the processor's and goka's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the wall clock, used only for the future-skew check, idle timeout and early firings
	// (default time.Now). Event time never comes from it.
	Now func() time.Time
	// Sarama, if set, adjusts every sarama config the processor builds (timeouts, TLS, SASL). It
	// runs after abacus's settings, so it can override them; keep Offsets.Initial at OffsetOldest.
	Sarama func(*sarama.Config)
	// GokaOptions are appended to the processor options (e.g. a storage builder).
	GokaOptions []goka.ProcessorOption
}

// EnsureDefaults fills in the zero fields.
func (c *Config) EnsureDefaults(topo *topology.Topology) {
	if c.Group == "" {
		c.Group = topo.Name
	}
	if c.StoragePath == "" {
		c.StoragePath = filepath.Join(os.TempDir(), "abacus", c.Group)
	}
	if c.Replication == 0 {
		c.Replication = 1
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = time.Minute
	}
	if c.TickInterval == 0 {
		c.TickInterval = max(c.IdleTimeout/4, 10*time.Millisecond)
	}
	if c.FinalRetention == 0 {
		c.FinalRetention = time.Minute
	}
	if c.LoopRetention == 0 {
		c.LoopRetention = 7 * 24 * time.Hour
	}
	if c.KafkaVersion == (sarama.KafkaVersion{}) {
		c.KafkaVersion = sarama.V2_8_0_0
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Processor runs one topology as a goka processor group.
type Processor struct {
	topo  *topology.Topology
	cfg   Config
	group goka.Group
	table string
	m     *metrics
	log   *slog.Logger

	mu       sync.Mutex
	parts    map[int32]*partition
	storages map[int32]storage.Storage
}

// New checks the configuration and prepares a processor; Run starts it.
func New(topo *topology.Topology, cfg Config) (*Processor, error) {
	if topo == nil {
		return nil, errors.New("processors.New: topology is nil")
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("processors.New: Config.Brokers is empty")
	}
	cfg.EnsureDefaults(topo)
	if len(topo.Sets) > math.MaxUint16 {
		return nil, fmt.Errorf("processors.New: %d aggregate sets, at most %d", len(topo.Sets), math.MaxUint16)
	}
	m, err := newMetrics(cfg.Registerer, topo.Name)
	if err != nil {
		return nil, fmt.Errorf("processors.New: register metrics: %w", err)
	}
	return &Processor{
		topo:     topo,
		cfg:      cfg,
		group:    goka.Group(cfg.Group),
		table:    string(goka.GroupTable(goka.Group(cfg.Group))),
		m:        m,
		log:      cfg.Logger.With("topology", topo.Name, "group", cfg.Group),
		parts:    map[int32]*partition{},
		storages: map[int32]storage.Storage{},
	}, nil
}

// LoopTopic is the name of the group's loop topic.
func (p *Processor) LoopTopic() string { return p.cfg.Group + "-loop" }

// saramaConfig returns a fresh sarama config for one client: goka's defaults, our protocol
// version, and the oldest offset for new groups, so nothing produced before the group first
// joined is skipped (DESIGN invariant 9).
func (p *Processor) saramaConfig(clientID string) *sarama.Config {
	c := goka.DefaultConfig()
	c.Version = p.cfg.KafkaVersion
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Producer.RequiredAcks = sarama.WaitForAll
	if clientID != "" {
		c.ClientID = clientID
	}
	if p.cfg.Sarama != nil {
		p.cfg.Sarama(c)
	}
	return c
}

func (p *Processor) topicManagerBuilder() goka.TopicManagerBuilder {
	return func(brokers []string) (goka.TopicManager, error) {
		tmc := goka.NewTopicManagerConfig()
		tmc.Table.Replication = p.cfg.Replication
		tmc.Stream.Replication = p.cfg.Replication
		tmc.Stream.Retention = p.cfg.LoopRetention
		return goka.NewTopicManager(brokers, p.saramaConfig("abacus-topic-manager"), tmc)
	}
}

func (p *Processor) producerBuilder() goka.ProducerBuilder {
	return func(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
		c := p.saramaConfig(clientID)
		c.Producer.Partitioner = sarama.NewCustomHashPartitioner(hasher)
		return goka.NewProducer(brokers, c)
	}
}

// Run creates the output topics, then runs the processor group until ctx is done or it fails.
func (p *Processor) Run(ctx context.Context) error {
	tmb := p.topicManagerBuilder()
	tm, err := tmb(p.cfg.Brokers)
	if err != nil {
		return fmt.Errorf("processor %s: topic manager: %w", p.group, err)
	}
	src := p.topo.Sources[0].Topic
	parts, err := tm.Partitions(src)
	if err != nil {
		tm.Close()
		return fmt.Errorf("processor %s: partitions of source %s: %w", p.group, src, err)
	}
	npar := len(parts)
	outputs := []string{p.topo.TotalsTopic, p.topo.DeadLetter}
	if p.topo.LateTopic != "" {
		outputs = append(outputs, p.topo.LateTopic)
	}
	for _, t := range outputs {
		if err := tm.EnsureStreamExists(t, npar); err != nil {
			tm.Close()
			return fmt.Errorf("processor %s: create output topic %s: %w", p.group, t, err)
		}
	}
	tm.Close()

	if err := p.checkCleanShutdown(); err != nil {
		return err
	}
	graph := p.graph()
	opts := []goka.ProcessorOption{
		goka.WithTopicManagerBuilder(tmb),
		goka.WithProducerBuilder(p.producerBuilder()),
		goka.WithConsumerGroupBuilder(func(brokers []string, group, clientID string) (sarama.ConsumerGroup, error) {
			return sarama.NewConsumerGroup(brokers, group, p.saramaConfig(clientID))
		}),
		goka.WithConsumerSaramaBuilder(func(brokers []string, clientID string) (sarama.Consumer, error) {
			return sarama.NewConsumer(brokers, p.saramaConfig(clientID))
		}),
		goka.WithStorageBuilder(p.storageBuilder(storage.DefaultBuilder(p.cfg.StoragePath))),
		goka.WithRebalanceCallback(p.rebalanced),
		goka.WithLogger(gokaLogger{p.log}),
	}
	opts = append(opts, p.cfg.GokaOptions...)
	proc, err := goka.NewProcessor(p.cfg.Brokers, graph, opts...)
	if err != nil {
		return fmt.Errorf("processor %s: %w", p.group, err)
	}

	emitter, err := goka.NewEmitter(p.cfg.Brokers, goka.Stream(p.LoopTopic()), new(codec.Bytes),
		goka.WithEmitterProducerBuilder(p.producerBuilder()),
		goka.WithEmitterTopicManagerBuilder(tmb),
		goka.WithEmitterLogger(gokaLogger{p.log}))
	if err != nil {
		return fmt.Errorf("processor %s: tick emitter: %w", p.group, err)
	}
	tickKeys := partitionKeys(npar)
	tctx, stopTicks := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.tick(tctx, emitter, tickKeys) })

	p.log.Info("processor starting", "partitions", npar, "sources", len(p.topo.Sources), "sets", len(p.topo.Sets))
	err = proc.Run(ctx)
	stopTicks()
	wg.Wait()
	if ferr := emitter.Finish(); ferr != nil && err == nil {
		err = fmt.Errorf("processor %s: finish tick emitter: %w", p.group, ferr)
	}
	if err != nil {
		return fmt.Errorf("processor %s: %w", p.group, err)
	}
	if err := os.WriteFile(p.cleanMarker(), []byte(time.Now().UTC().Format(time.RFC3339)), 0o644); err != nil {
		return fmt.Errorf("processor %s: mark clean shutdown: %w", p.group, err)
	}
	return nil
}

func (p *Processor) cleanMarker() string {
	return filepath.Join(p.cfg.StoragePath, "abacus-clean-shutdown")
}

// checkCleanShutdown discards the local tables unless the last run ended cleanly. goka writes its
// local table at once and Kafka later: after a crash the local table holds writes the changelog
// never got, and on start goka lays the changelog's acknowledged writes over it, so some entities
// come back older than others. The partition stream time rebuilt from such a mix is ahead of
// where the replay resumes, and replayed events would be judged late. The changelog alone is a
// prefix of the partition's writes, hence consistent: recover from it.
func (p *Processor) checkCleanShutdown() error {
	entries, err := os.ReadDir(p.cfg.StoragePath)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(p.cfg.StoragePath, 0o755)
	}
	if err != nil {
		return fmt.Errorf("processor %s: read storage folder: %w", p.group, err)
	}
	if len(entries) == 0 {
		return nil // a fresh folder
	}
	if _, err := os.Stat(p.cleanMarker()); err == nil {
		if err := os.Remove(p.cleanMarker()); err != nil {
			return fmt.Errorf("processor %s: clear clean-shutdown mark: %w", p.group, err)
		}
		return nil
	}
	p.log.Warn("last run did not end cleanly: discarding local tables, recovering state from the changelog",
		"storage", p.cfg.StoragePath)
	if err := os.RemoveAll(p.cfg.StoragePath); err != nil {
		return fmt.Errorf("processor %s: discard local tables: %w", p.group, err)
	}
	return os.MkdirAll(p.cfg.StoragePath, 0o755)
}

// tick sends every partition a tick each TickInterval until ctx is done. Ticks go to every
// partition from every instance: a tick for a partition another instance owns is harmless.
func (p *Processor) tick(ctx context.Context, em *goka.Emitter, keys []string) {
	t := time.NewTicker(p.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		msg := (&loopMsg{kind: loopTick, time: p.cfg.Now().UnixMilli()}).encode()
		for _, k := range keys {
			if _, err := em.Emit(k, msg); err != nil {
				p.log.Warn("send tick", "key", k, "err", err)
			}
		}
	}
}

// partitionKeys finds, for each partition, a key that goka's default hasher (FNV-1a 32, as the
// sarama hash partitioner uses it) sends to that partition, so ticks reach every partition.
func partitionKeys(npar int) []string {
	keys := make([]string, npar)
	found := 0
	h := fnv.New32a()
	for n := 0; found < npar; n++ {
		k := "abacus-tick-" + strconv.Itoa(n)
		h.Reset()
		h.Write([]byte(k))
		part := int32(h.Sum32()) % int32(npar)
		if part < 0 {
			part = -part
		}
		if keys[part] == "" {
			keys[part] = k
			found++
		}
	}
	return keys
}

func isTickKey(k string) bool { return len(k) > 12 && k[:12] == "abacus-tick-" }

func (p *Processor) graph() *goka.GroupGraph {
	edges := []goka.Edge{}
	for i, s := range p.topo.Sources {
		edges = append(edges, goka.Input(goka.Stream(s.Topic), new(codec.Bytes), p.onSource(i)))
	}
	edges = append(edges,
		goka.Loop(new(codec.Bytes), p.onLoop),
		goka.Persist(state.Codec{}),
		goka.Output(goka.Stream(p.topo.TotalsTopic), new(codec.Bytes)),
		goka.Output(goka.Stream(p.topo.DeadLetter), new(codec.Bytes)),
	)
	if p.topo.LateTopic != "" {
		edges = append(edges, goka.Output(goka.Stream(p.topo.LateTopic), new(codec.Bytes)))
	}
	return goka.DefineGroup(p.group, edges...)
}

// storageBuilder remembers each partition's table storage, so that the close index can be rebuilt
// from it after an assignment.
func (p *Processor) storageBuilder(inner storage.Builder) storage.Builder {
	return func(topic string, part int32) (storage.Storage, error) {
		st, err := inner(topic, part)
		if err != nil {
			return nil, err
		}
		if topic == p.table {
			p.mu.Lock()
			p.storages[part] = st
			p.mu.Unlock()
		}
		return st, nil
	}
}

// rebalanced forgets the in-memory partition state: whatever partitions the new assignment
// brings are rebuilt from their storage at their first callback.
func (p *Processor) rebalanced(a goka.Assignment) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.parts {
		label := strconv.Itoa(int(id))
		p.m.windowsOpen.DeleteLabelValues(label)
		p.m.windowsHeld.DeleteLabelValues(label)
		p.m.streamTimeLag.DeleteLabelValues(label)
	}
	p.parts = map[int32]*partition{}
	p.log.Info("assignment", "partitions", len(a))
}

// partition is the in-memory view of one assigned partition. Only that partition's goroutine
// touches it (goka runs one goroutine per partition for all its topics).
type partition struct {
	id         int32
	label      string
	st         storage.Storage // the partition's local table, read to emit other entities' finals
	streamTime int64
	lastInput  time.Time
	windows    int              // windows whose final total this process has not emitted
	held       int              // windows in the table
	due        dueHeap          // entities by the close time of their next window to emit
	next       map[string]int64 // entity -> its live entry in due
	// emitted remembers, per entity, the final emissions this process made and has not pruned:
	// windows closing at or before upTo were emitted at wall time at.
	emitted map[string][]emission
	prunes  []retainedEntry // entities with emitted windows, by when they may be pruned

	// The partition's metric series, looked up once: a label lookup per event costs.
	eventsIn   []prometheus.Counter // per source
	duplicates prometheus.Counter
	lag, open  prometheus.Gauge
	heldGauge  prometheus.Gauge
}

type emission struct {
	upTo int64
	at   time.Time
}

type retainedEntry struct {
	at     time.Time
	entity string
}

func (p *Processor) partition(id int32) (*partition, error) {
	p.mu.Lock()
	pt, ok := p.parts[id]
	st := p.storages[id]
	p.mu.Unlock()
	if ok {
		return pt, nil
	}
	if st == nil {
		return nil, fmt.Errorf("partition %d: no storage for table %s", id, p.table)
	}
	pt = &partition{id: id, label: strconv.Itoa(int(id)), st: st, streamTime: math.MinInt64, lastInput: p.cfg.Now(),
		next: map[string]int64{}, emitted: map[string][]emission{}}
	for _, src := range p.topo.Sources {
		pt.eventsIn = append(pt.eventsIn, p.m.eventsIn.WithLabelValues(src.Topic, pt.label))
	}
	pt.duplicates = p.m.duplicates.WithLabelValues(pt.label)
	pt.lag = p.m.streamTimeLag.WithLabelValues(pt.label)
	pt.open = p.m.windowsOpen.WithLabelValues(pt.label)
	pt.heldGauge = p.m.windowsHeld.WithLabelValues(pt.label)
	it, err := st.Iterator()
	if err != nil {
		return nil, fmt.Errorf("partition %d: iterate table: %w", id, err)
	}
	defer it.Release()
	n := 0
	for it.Next() {
		v, err := it.Value()
		if err != nil {
			return nil, fmt.Errorf("partition %d: read table: %w", id, err)
		}
		e, err := state.Decode(v)
		if err != nil {
			return nil, fmt.Errorf("partition %d: key %q: %w", id, it.Key(), err)
		}
		pt.streamTime = max(pt.streamTime, e.StreamTime)
		// Whether a closed window's final total reached Kafka before the restart is unknown:
		// every window in the table counts as not emitted, and closed ones are emitted again.
		pt.windows += len(e.Windows)
		pt.held += len(e.Windows)
		p.schedule(pt, string(it.Key()), e)
		n++
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("partition %d: iterate table: %w", id, err)
	}
	pt.open.Set(float64(pt.windows))
	pt.heldGauge.Set(float64(pt.held))
	p.log.Debug("partition rebuilt", "partition", id, "entities", n, "windows", pt.windows, "stream_time", pt.streamTime)
	p.mu.Lock()
	p.parts[id] = pt
	p.mu.Unlock()
	return pt, nil
}

func (p *Processor) closesAt(w *state.Window) int64 { return w.End + p.topo.Sets[w.Set].Grace }

// emittedUpTo is the stream time up to which this process emitted the entity's closed windows.
func (pt *partition) emittedUpTo(entity string) int64 {
	up := int64(math.MinInt64)
	for _, em := range pt.emitted[entity] {
		up = max(up, em.upTo)
	}
	return up
}

// schedule records in the heap when the entity's next window still to emit closes.
func (p *Processor) schedule(pt *partition, entity string, e *state.Entity) {
	up := pt.emittedUpTo(entity)
	at, found := int64(0), false
	for i := range e.Windows {
		if c := p.closesAt(&e.Windows[i]); c > up && (!found || c < at) {
			at, found = c, true
		}
	}
	if !found {
		delete(pt.next, entity)
		return
	}
	if cur, ok := pt.next[entity]; ok && cur == at {
		return
	}
	pt.next[entity] = at
	heap.Push(&pt.due, dueEntry{at: at, entity: entity})
}

// closeDue emits the final totals of every window that stream time has closed. It reads the
// entities' state from the local table and emits from whatever callback advanced stream time: no
// message per entity, no write. The windows stay in the table, closed, until pruned (see prune),
// so that after a crash the rebuilt partition finds them and emits them again.
func (p *Processor) closeDue(ctx goka.Context, pt *partition) {
	for pt.due.Len() > 0 && pt.due[0].at <= pt.streamTime {
		d := heap.Pop(&pt.due).(dueEntry)
		if cur, ok := pt.next[d.entity]; !ok || cur != d.at {
			continue // superseded entry
		}
		delete(pt.next, d.entity)
		raw, err := pt.st.Get(d.entity)
		if err != nil {
			p.fail(ctx, fmt.Errorf("partition %d: read state of %q: %w", pt.id, d.entity, err))
			return
		}
		if raw == nil {
			continue
		}
		e, err := state.Decode(raw)
		if err != nil {
			p.fail(ctx, fmt.Errorf("partition %d: state of %q: %w", pt.id, d.entity, err))
			return
		}
		if err := p.emitClosed(ctx, pt, d.entity, e); err != nil {
			p.fail(ctx, err)
			return
		}
		p.schedule(pt, d.entity, e)
	}
}

// emitClosed emits the final totals of the entity's windows closed at the partition's stream time
// and not emitted yet by this process.
func (p *Processor) emitClosed(ctx goka.Context, pt *partition, entity string, e *state.Entity) error {
	up := pt.emittedUpTo(entity)
	n := 0
	for i := range e.Windows {
		w := &e.Windows[i]
		if c := p.closesAt(w); c <= up || c > pt.streamTime {
			continue
		}
		set := p.topo.Sets[w.Set]
		accs, err := p.accumulators(set, e, i)
		if err != nil {
			return fmt.Errorf("close %q of %q window %d: %w", set.Name, entity, w.Start, err)
		}
		p.emit(ctx, entity, set, w, accs, true)
		n++
	}
	if n > 0 {
		now := p.cfg.Now()
		pt.emitted[entity] = append(pt.emitted[entity], emission{upTo: pt.streamTime, at: now})
		pt.prunes = append(pt.prunes, retainedEntry{at: now.Add(p.cfg.FinalRetention), entity: entity})
		p.windowsDelta(pt, -n, 0)
	}
	return nil
}

// prune drops from e the windows whose final total this process emitted at least FinalRetention
// ago, and reports whether it dropped any. Younger ones stay: goka writes the table before Kafka
// acknowledges the emitted total, and a crash in between must leave the window for the rebuilt
// partition to emit again.
func (p *Processor) prune(pt *partition, entity string, e *state.Entity, now time.Time) bool {
	ems := pt.emitted[entity]
	up := int64(math.MinInt64)
	keep := ems[:0]
	for _, em := range ems {
		if now.Sub(em.at) >= p.cfg.FinalRetention {
			up = max(up, em.upTo)
		} else {
			keep = append(keep, em)
		}
	}
	if len(keep) == 0 {
		delete(pt.emitted, entity)
	} else {
		pt.emitted[entity] = keep
	}
	if up == math.MinInt64 {
		return false
	}
	kept := e.Windows[:0]
	for _, w := range e.Windows {
		if p.closesAt(&w) > up {
			kept = append(kept, w)
		}
	}
	pruned := len(e.Windows) - len(kept)
	e.Windows = kept
	p.windowsDelta(pt, 0, -pruned)
	return pruned > 0
}

func (p *Processor) fail(ctx goka.Context, err error) {
	p.log.Error("processor callback failed", "key", ctx.Key(), "topic", ctx.Topic(), "partition", ctx.Partition(), "offset", ctx.Offset(), "err", err)
	ctx.Fail(err)
}

func (p *Processor) onSource(idx int) goka.ProcessCallback {
	src := p.topo.Sources[idx]
	return func(ctx goka.Context, msg any) {
		pt, err := p.partition(ctx.Partition())
		if err != nil {
			p.fail(ctx, err)
			return
		}
		pt.lastInput = p.cfg.Now() // apply reads it back as its wall clock
		pt.eventsIn[idx].Inc()
		raw, _ := msg.([]byte)
		ev, err := src.Decode(raw)
		if err != nil {
			p.deadLetter(ctx, raw, "undecodable", err.Error(), string(ctx.Topic()), ctx.Partition(), ctx.Offset())
			return
		}
		entity := src.Entity(ev)
		if src.Repartition {
			m := &loopMsg{kind: loopEvent, source: idx, topic: string(ctx.Topic()), partition: ctx.Partition(), offset: ctx.Offset(), value: raw}
			ctx.Loopback(entity, m.encode())
			return
		}
		if entity != ctx.Key() {
			p.deadLetter(ctx, raw, "entity-not-key",
				fmt.Sprintf("entity %q differs from the record key %q: declare the source with Repartition()", entity, ctx.Key()),
				string(ctx.Topic()), ctx.Partition(), ctx.Offset())
			return
		}
		p.apply(ctx, pt, src, string(ctx.Topic()), ctx.Partition(), ctx.Offset(), raw, ev)
	}
}

func (p *Processor) onLoop(ctx goka.Context, msg any) {
	pt, err := p.partition(ctx.Partition())
	if err != nil {
		p.fail(ctx, err)
		return
	}
	raw, _ := msg.([]byte)
	m, err := decodeLoop(raw)
	if err != nil {
		// Only this processor writes the loop topic: a corrupt message is a bug, not bad input.
		p.fail(ctx, fmt.Errorf("loop message at %d/%d: %w", ctx.Partition(), ctx.Offset(), err))
		return
	}
	switch m.kind {
	case loopTick:
		if isTickKey(ctx.Key()) {
			p.onTick(ctx, pt)
		}
	case loopClose:
		p.onClose(ctx, pt)
	case loopEvent:
		if m.source < 0 || m.source >= len(p.topo.Sources) {
			p.fail(ctx, fmt.Errorf("loop event names source %d of %d", m.source, len(p.topo.Sources)))
			return
		}
		src := p.topo.Sources[m.source]
		pt.lastInput = p.cfg.Now() // apply reads it back as its wall clock
		ev, err := src.Decode(m.value)
		if err != nil {
			p.deadLetter(ctx, m.value, "undecodable", err.Error(), m.topic, m.partition, m.offset)
			return
		}
		p.apply(ctx, pt, src, m.topic, m.partition, m.offset, m.value, ev)
	}
}

func (p *Processor) value(ctx goka.Context) (*state.Entity, error) {
	v := ctx.Value()
	if v == nil {
		return nil, nil
	}
	e, ok := v.(*state.Entity)
	if !ok {
		return nil, fmt.Errorf("table value of %q is %T, want *state.Entity", ctx.Key(), v)
	}
	return e, nil
}

// apply applies one source event to its entity, exactly once.
func (p *Processor) apply(ctx goka.Context, pt *partition, src *topology.SourceDef, topic string, part int32, offset int64, raw []byte, ev topology.Event) {
	now := pt.lastInput
	t := src.EventTime(ev)
	if limit := now.Add(p.topo.MaxFutureSkew).UnixMilli(); t > limit {
		p.deadLetter(ctx, raw, "future",
			fmt.Sprintf("event time %s is more than %v ahead of the wall clock", time.UnixMilli(t).UTC().Format(time.RFC3339Nano), p.topo.MaxFutureSkew),
			topic, part, offset)
		return
	}
	e, err := p.value(ctx)
	if err != nil {
		p.fail(ctx, err)
		return
	}
	if e == nil {
		e = &state.Entity{}
	}
	if e.Applied(topic, part, offset) {
		// A replay: the local table has this event, but what was sent to Kafka when it was
		// applied (the changelog write, totals) may have died with the process, and this
		// record's offset is about to be committed. Write the state again, so the changelog holds
		// it before the commit, and re-send the current totals (absolute, so resending is safe).
		pt.duplicates.Inc()
		ctx.SetValue(e)
		p.reemitUpdates(ctx, pt, e, src, t)
		return
	}
	pt.streamTime = max(pt.streamTime, t)
	before := len(e.Windows)
	typ := src.Type(ev)
	changed := false
	for _, si := range src.Sets {
		set := p.topo.Sets[si]
		if !set.Accepts(typ) {
			continue
		}
		var applied bool
		var err error
		if set.Window.Kind() == windows.KindSession {
			applied, err = p.addSession(ctx, pt, e, set, ev, t, now)
		} else {
			applied, err = p.addFixed(ctx, pt, e, set, ev, t, now)
		}
		if err != nil {
			p.fail(ctx, fmt.Errorf("entity %q set %q: %w", ctx.Key(), set.Name, err))
			return
		}
		if applied {
			changed = true
			continue
		}
		p.late(ctx, raw, set, topic, part, offset)
	}
	if !changed {
		// Nothing but late windows: the state is unchanged, so the write is saved. A replay
		// routes the event to the late topic again (late and dead-letter routing is at least once).
		p.closeDue(ctx, pt)
		return
	}
	p.windowsDelta(pt, len(e.Windows)-before, len(e.Windows)-before)
	p.prune(pt, ctx.Key(), e, now)
	e.Advance(topic, part, offset)
	e.StreamTime = pt.streamTime
	ctx.SetValue(e)
	p.schedule(pt, ctx.Key(), e)
	pt.lag.Set(float64(now.UnixMilli()-pt.streamTime) / 1000)
	p.closeDue(ctx, pt)
}

// windowsDelta adds open to the windows not yet emitted and held to the windows in the table.
func (p *Processor) windowsDelta(pt *partition, open, held int) {
	if open != 0 {
		pt.windows += open
		pt.open.Set(float64(pt.windows))
	}
	if held != 0 {
		pt.held += held
		pt.heldGauge.Set(float64(pt.held))
	}
}

// addFixed applies ev to its tumbling or hopping windows that are still open, and reports whether
// it applied to any.
func (p *Processor) addFixed(ctx goka.Context, pt *partition, e *state.Entity, set *topology.SetDef, ev topology.Event, t int64, now time.Time) (bool, error) {
	var buf [8]windows.Window
	applied := false
	for _, w := range set.Window.Assign(t, buf[:0]) {
		if w.Closed(set.Grace, pt.streamTime) {
			continue
		}
		i := e.Find(set.Index, w.Start)
		accs, err := p.accumulators(set, e, i)
		if err != nil {
			return false, err
		}
		if i < 0 {
			e.Windows = append(e.Windows, state.Window{Set: set.Index, Start: w.Start, End: w.End})
			i = len(e.Windows) - 1
		}
		for _, a := range accs {
			a.Add(ev, t)
		}
		p.store(&e.Windows[i], accs)
		e.Windows[i].Revision++
		p.emitUpdate(ctx, ctx.Key(), set, &e.Windows[i], accs, now)
		applied = true
	}
	return applied, nil
}

// addSession merges ev's session [t, t+gap) with the entity's overlapping sessions of the set.
func (p *Processor) addSession(ctx goka.Context, pt *partition, e *state.Entity, set *topology.SetDef, ev topology.Event, t int64, now time.Time) (bool, error) {
	var idx []int
	var open []windows.Window
	for i, w := range e.Windows {
		// A session that stream time has closed (its close message may still be in flight) is
		// final: a new event must not reopen it, whether or not the close has been handled yet.
		if w.Set == set.Index && !(windows.Window{Start: w.Start, End: w.End}).Closed(set.Grace, pt.streamTime) {
			idx = append(idx, i)
			open = append(open, windows.Window{Start: w.Start, End: w.End})
		}
	}
	merged, absorbed := windows.MergeSession(open, set.Window.Assign(t, nil)[0])
	if merged.Closed(set.Grace, pt.streamTime) {
		return false, nil
	}
	accs, err := p.accumulators(set, e, -1)
	if err != nil {
		return false, err
	}
	for _, a := range accs {
		a.Add(ev, t)
	}
	nw := state.Window{Set: set.Index, Start: merged.Start, End: merged.End, Revision: 1}
	remove := map[int]bool{}
	for _, ai := range absorbed {
		si := idx[ai]
		old, err := p.accumulators(set, e, si)
		if err != nil {
			return false, err
		}
		for k := range accs {
			if err := accs[k].Merge(old[k]); err != nil {
				return false, fmt.Errorf("merge %q: %w", set.Aggs[k].Name, err)
			}
		}
		nw.Revision += e.Windows[si].Revision
		nw.LastEmit = max(nw.LastEmit, e.Windows[si].LastEmit)
		remove[si] = true
	}
	kept := e.Windows[:0]
	for i, w := range e.Windows {
		if !remove[i] {
			kept = append(kept, w)
		}
	}
	e.Windows = append(kept, nw)
	w := &e.Windows[len(e.Windows)-1]
	p.store(w, accs)
	p.emitUpdate(ctx, ctx.Key(), set, w, accs, now)
	return true, nil
}

// accumulators decodes window i's accumulators, or returns fresh ones when i < 0.
func (p *Processor) accumulators(set *topology.SetDef, e *state.Entity, i int) ([]topology.Accumulator, error) {
	accs := make([]topology.Accumulator, len(set.Aggs))
	for k, ad := range set.Aggs {
		if i < 0 {
			accs[k] = ad.New()
			continue
		}
		w := e.Windows[i]
		if k >= len(w.Aggs) {
			return nil, fmt.Errorf("window %d has %d accumulators, the set declares %d (topology changed?)", w.Start, len(w.Aggs), len(set.Aggs))
		}
		a, err := ad.Decode(w.Aggs[k])
		if err != nil {
			return nil, fmt.Errorf("window %d: %w", w.Start, err)
		}
		accs[k] = a
	}
	return accs, nil
}

func (p *Processor) store(w *state.Window, accs []topology.Accumulator) {
	aggs := make([][]byte, len(accs))
	for k, a := range accs {
		aggs[k] = a.AppendBinary(nil)
	}
	w.Aggs = aggs
}

func (p *Processor) emitUpdate(ctx goka.Context, entity string, set *topology.SetDef, w *state.Window, accs []topology.Accumulator, now time.Time) {
	switch set.Emit.Mode {
	case topology.EmitEveryUpdate:
	case topology.EmitEarly:
		if w.LastEmit != 0 && now.Sub(time.UnixMilli(w.LastEmit)) < set.Emit.Every {
			return
		}
		w.LastEmit = now.UnixMilli()
	default:
		return
	}
	p.emit(ctx, entity, set, w, accs, false)
}

// emit writes one window total to the totals topic, keyed by entity.
func (p *Processor) emit(ctx goka.Context, entity string, set *topology.SetDef, w *state.Window, accs []topology.Accumulator, final bool) {
	r := totals.Record{Topology: p.topo.Name, Set: set.Name, Entity: entity, Start: w.Start, End: w.End,
		Final: final, Revision: w.Revision, Values: make([]totals.Value, len(accs))}
	for k, a := range accs {
		v := a.Value()
		v.Name = set.Aggs[k].Name
		r.Values[k] = v
	}
	ctx.Emit(goka.Stream(p.topo.TotalsTopic), entity, r.Encode())
	p.m.emitted.WithLabelValues(set.Name, strconv.FormatBool(final)).Inc()
}

// onClose handles a close message: the entity's emitted windows that FinalRetention allows are
// pruned. Entities that receive events are pruned on the way (apply); close messages are for the
// others, sent from ticks.
func (p *Processor) onClose(ctx goka.Context, pt *partition) {
	e, err := p.value(ctx)
	if err != nil {
		p.fail(ctx, err)
		return
	}
	if e == nil {
		return
	}
	if p.prune(pt, ctx.Key(), e, p.cfg.Now()) {
		e.StreamTime = max(e.StreamTime, pt.streamTime)
		ctx.SetValue(e)
	}
	p.schedule(pt, ctx.Key(), e)
}

// reemitUpdates re-sends the current totals of the open windows that a replayed event belongs to,
// for sets that emit every update.
func (p *Processor) reemitUpdates(ctx goka.Context, pt *partition, e *state.Entity, src *topology.SourceDef, t int64) {
	for _, si := range src.Sets {
		set := p.topo.Sets[si]
		if set.Emit.Mode != topology.EmitEveryUpdate {
			continue
		}
		for i := range e.Windows {
			w := &e.Windows[i]
			if w.Set != si || t < w.Start || t >= w.End || p.closesAt(w) <= pt.streamTime {
				continue
			}
			accs, err := p.accumulators(set, e, i)
			if err != nil {
				p.fail(ctx, fmt.Errorf("entity %q set %q: %w", ctx.Key(), set.Name, err))
				return
			}
			p.emit(ctx, ctx.Key(), set, w, accs, false)
		}
	}
}

// onTick advances an idle partition's stream time with the wall clock, up to the last close time
// it waits for, and closes what is due.
func (p *Processor) onTick(ctx goka.Context, pt *partition) {
	now := p.cfg.Now()
	if now.Sub(pt.lastInput) >= p.cfg.IdleTimeout && len(pt.next) > 0 {
		var last int64 = math.MinInt64
		for _, at := range pt.next {
			last = max(last, at)
		}
		if target := min(now.UnixMilli(), last); target > pt.streamTime {
			p.log.Debug("idle partition advances stream time", "partition", pt.id, "from", pt.streamTime, "to", target)
			pt.streamTime = target
		}
	}
	if pt.streamTime != math.MinInt64 {
		pt.lag.Set(float64(now.UnixMilli()-pt.streamTime) / 1000)
	}
	p.closeDue(ctx, pt)
	// Entities whose emitted windows have outlived FinalRetention and that no event has pruned
	// since get a close message, which prunes them.
	n := 0
	for n < len(pt.prunes) && !pt.prunes[n].at.After(now) {
		ent := pt.prunes[n].entity
		for _, em := range pt.emitted[ent] {
			if now.Sub(em.at) >= p.cfg.FinalRetention {
				ctx.Loopback(ent, (&loopMsg{kind: loopClose, time: pt.streamTime}).encode())
				break
			}
		}
		n++
	}
	pt.prunes = pt.prunes[n:]
}

func (p *Processor) late(ctx goka.Context, raw []byte, set *topology.SetDef, topic string, part int32, offset int64) {
	if p.topo.LateTopic == "" {
		p.m.lateDropped.WithLabelValues(set.Name).Inc()
		return
	}
	ctx.Emit(goka.Stream(p.topo.LateTopic), ctx.Key(), raw, goka.WithCtxEmitHeaders(goka.Headers{
		HeaderReason: []byte("late"),
		HeaderSet:    []byte(set.Name),
		HeaderSource: []byte(fmt.Sprintf("%s/%d/%d", topic, part, offset)),
	}))
	p.m.lateRouted.WithLabelValues(set.Name).Inc()
}

func (p *Processor) deadLetter(ctx goka.Context, raw []byte, reason, detail, topic string, part int32, offset int64) {
	ctx.Emit(goka.Stream(p.topo.DeadLetter), ctx.Key(), raw, goka.WithCtxEmitHeaders(goka.Headers{
		HeaderReason: []byte(reason + ": " + detail),
		HeaderSource: []byte(fmt.Sprintf("%s/%d/%d", topic, part, offset)),
	}))
	p.m.deadLettered.WithLabelValues(reason).Inc()
}

type dueEntry struct {
	at     int64
	entity string
}

// dueHeap is a min-heap of entity close times.
type dueHeap []dueEntry

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// gokaLogger sends goka's logs to slog at debug level: goka is chatty about normal rebalances.
type gokaLogger struct{ l *slog.Logger }

// Print implements goka.Logger.
func (g gokaLogger) Print(v ...any) { g.l.Debug(fmt.Sprint(v...), "component", "goka") }

// Println implements goka.Logger.
func (g gokaLogger) Println(v ...any) { g.l.Debug(fmt.Sprint(v...), "component", "goka") }

// Printf implements goka.Logger.
func (g gokaLogger) Printf(format string, v ...any) {
	g.l.Debug(fmt.Sprintf(format, v...), "component", "goka")
}
