// Package engine applies a topology's events to per-entity windows and emits their totals: the
// part of the processor that does not depend on how it is deployed. It runs inside goka callbacks
// (goka.Context, goka storage): package processors wires it into a goka processor group on Kafka,
// package abacustest runs it in memory for users' tests, so both run exactly this code.
//
// It must never apply a source record to an entity twice, never read event time from a clock,
// never emit two different final totals for one window, and never stop on a bad record or on user
// code that panics: such a record goes to the dead-letter topic with its reason.
//
// # Stream time and lateness
//
// A partition has inputs (origins): each source topic's partition it reads, and, for re-keyed
// events, each source partition they came from. An origin's watermark is the largest event time
// applied from it. An event is late for a window when the window closed by its own origin's
// watermark (or by the partition's idle advance): the decision depends only on the origin's own
// record order, never on how fetches of several inputs interleave. A window closes, and its final
// total is emitted, when the partition's stream time, the smallest watermark of the origins that
// have data (or the idle advance, if later), passes its end plus grace; by then every origin
// judges it closed, so its content is fixed. An origin's watermark moves only with an applied
// event, whose state write records it; so the watermarks rebuilt from the table after a restart
// are those the replay resumes from, and replayed events are judged as before.
//
// # Closing windows
//
// goka calls back only for keys that receive messages, so an entity whose events stop would never
// see its windows close. Each partition keeps, in memory, the next close time of every entity that
// has windows (a heap with one entry per entity), rebuilt from the partition's local table after
// an assignment. Whatever callback advances the partition's stream time past an entity's next
// close reads that entity's state from the local table and emits the final totals of its closed
// windows; no message and no write per close.
//
// A final total is emitted only from state that Kafka has acknowledged (Durability): if the entity
// was written and the write is not acknowledged yet, its close waits for the acknowledgement. A
// crash can then lose a final total but never make it disagree with the state a restart rebuilds:
// the rebuilt partition finds the window closed and emits the same total again. A closed window
// stays in the table until its final total is acknowledged, then goes at the entity's next write,
// or through a close message sent to it through the loop topic when it has no more events; an
// entity with nothing left leaves the table.
//
// # Idle partitions
//
// A periodic tick, sent to every partition through the loop topic, lets a partition whose origins
// have seen no event advance for Config.IdleTimeout move its stream time on: past the origins that
// are quiet (to the smallest watermark of the others), or, when all are, with the wall clock (never
// beyond the last close it waits for). Such an advance is a decision of the wall clock, not of the
// data, so it is written to the partition's own record in the table first and applied only once
// Kafka acknowledged it: a restart finds it and keeps it.
//
// # Replays
//
// Every entity keeps, per origin, the highest offset it applied; a replayed record is skipped, its
// state written again (the local table may be ahead of the changelog) and, for sets that emit
// every update, its windows' current totals re-sent. After a run that did not end cleanly the
// local tables are discarded and rebuilt from the changelog (package processors), the one copy
// that is a consistent prefix of the partition's history.
//
// Kafka acknowledges writes to different partitions in any order, so a state write that fences a
// record can be kept by a crash that loses what was written for the record before it. Nothing is
// lost that way: a record's late records go out before a write that fences it when it is applied
// (DurableSender), and, when it is late for every window, the write that fences it lists it as
// pending until it is done, so that a replay sends its late records again; dead letters of
// records that a later write of their entity fences go out durably too.
//
// The partition's record also keeps, per origin, a done offset: every record up to it was
// processed and everything written for it acknowledged (the producer's acknowledged prefix). A
// record at or below it is a replay whatever became of its entity, which leaves the table only
// once the done offsets pass its fences: a rewind then reports no late records for entities long
// gone.
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/windows"
)

// The defaults of the engine's clocks, the one source of them for the processor's configuration,
// the test driver's and the config file's.
const (
	DefaultIdleTimeout    = time.Minute
	DefaultFinalRetention = time.Minute
)

// DefaultTickInterval is the interval of ticks for an idle timeout: four per timeout, so that an
// idle partition waits at most a quarter past it; at least 10 ms.
func DefaultTickInterval(idleTimeout time.Duration) time.Duration {
	return max(idleTimeout/4, 10*time.Millisecond)
}

// Config is what the engine needs of the processor's configuration (package processors fills it
// from its defaults).
type Config struct {
	// IdleTimeout is how long an origin (or the whole partition) may see no event advance it
	// before the partition's stream time moves on without it.
	IdleTimeout time.Duration
	// FinalRetention is how long a closed window whose final total Kafka acknowledged waits for
	// its entity's next write to drop it, before a close message is sent to drop it.
	FinalRetention time.Duration
	// Registerer receives the engine's metrics.
	Registerer prometheus.Registerer
	// Logger receives the engine's logs.
	Logger *slog.Logger
	// Now is the wall clock: idle timeouts, early firings and retention. Event time never comes
	// from it, and neither does a decision on an event.
	Now func() time.Time
	// Durability says which writes Kafka acknowledged; nil means every write is acknowledged at
	// once (an in-memory store).
	Durability Durability
	// CacheEntities bounds the decoded entities each partition keeps in memory (default 20,000;
	// negative: none), so that an entity's next event and its windows' close read no table.
	CacheEntities int
	// Output, if set, takes every message the engine emits, with its headers, in place of
	// ctx.Emit: goka's context options are opaque, and the in-memory test driver must read the
	// headers of dead letters.
	Output func(ctx goka.Context, topic, key string, value []byte, headers goka.Headers)
	// Group, if set, names the processor group on every dead letter and late record, with the
	// record whose callback wrote it (deadletter.HeaderGroup, HeaderBy): what a restarted
	// processor reads back to find what it wrote before (Written).
	Group string
	// Written, if set, says whether a dead letter or late record of this identity
	// (deadletter.Record.Identity) is in Kafka already, written by a run that crashed before
	// committing the record now processed again: the engine does not write it a second time.
	// It is called from callbacks, concurrently.
	Written func(identity string) bool
	// Tables, if set, are the topology's tables (its joins look them up); SetTables may set them
	// later, before the first callback.
	Tables Tables
}

// Tables looks up a topology's tables (plan.Plan.Tables, by index) by event time: package tables
// reads them from Kafka, or holds them in memory for drivers.
type Tables interface {
	// Wait blocks until the table can answer for event time t of an event whose record is
	// stamped record (what was written to the table before that record should be read); false
	// when it stopped waiting (its grace passed, or ctx ended) and answers as it is.
	Wait(ctx context.Context, table int, t int64, record time.Time) bool
	// At is the value key had at time t in the table, if any.
	At(table int, key string, t int64) (any, bool)
}

// Engine runs one topology's windows over the partitions of one goka group.
type Engine struct {
	plan     *plan.Plan
	cfg      Config
	m        *metrics
	log      *slog.Logger
	layout   state.Layout
	topicIDs []uint32 // per source
	// span is how far past an event's time its last window closes (largest window size plus
	// grace); -1 when a set has session windows, whose merges can reach any time back.
	span int64
	// cacheLimit is Config.CacheEntities with its default.
	cacheLimit int
	// rollups says the plan has rollup sets: partitions then exchange partials and progress.
	rollups bool

	mu       sync.Mutex
	parts    map[int32]*partition
	storages map[int32]storage.Storage
	tickKeys []string // per partition, once SetPartitions is called
	// resumes are the offsets the group resumes its source partitions from (Resumed), per
	// partition, until the partition takes them in; resumeGen counts them, so that a running
	// partition sees a new one without taking the lock at every record.
	resumes   map[int32]map[originKey]int64
	resumeGen atomic.Uint64
	// tables are Config.Tables, or what SetTables gave.
	tables atomic.Pointer[Tables]
}

// New prepares an engine for the plan.
func New(p *plan.Plan, cfg Config) (*Engine, error) {
	if len(p.Sets) > math.MaxUint16 {
		return nil, fmt.Errorf("engine: %d aggregate sets, at most %d", len(p.Sets), math.MaxUint16)
	}
	ids := make([]uint32, len(p.Sources))
	seen := map[uint32]string{}
	for i, s := range p.Sources {
		ids[i] = state.TopicID(s.Topic)
		if other, dup := seen[ids[i]]; dup {
			return nil, fmt.Errorf("engine: sources %q and %q have the same topic ID in the state; rename one", other, s.Topic)
		}
		seen[ids[i]] = s.Topic
	}
	if cfg.Durability == nil {
		cfg.Durability = immediate{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Output == nil {
		cfg.Output = func(ctx goka.Context, topic, key string, value []byte, headers goka.Headers) {
			if len(headers) == 0 {
				ctx.Emit(goka.Stream(topic), key, value)
				return
			}
			ctx.Emit(goka.Stream(topic), key, value, goka.WithCtxEmitHeaders(headers))
		}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.Registerer, p.Name)
	if err != nil {
		return nil, fmt.Errorf("engine: register metrics: %w", err)
	}
	if cfg.CacheEntities == 0 {
		cfg.CacheEntities = 20_000
	}
	var span int64
	for _, s := range p.Sets {
		if s.Window.Kind() == windows.KindSession {
			span = -1
			break
		}
		span = max(span, s.Window.Size()+s.Grace)
	}
	e := &Engine{plan: p, cfg: cfg, m: m, log: cfg.Logger, layout: p.Layout(), topicIDs: ids, span: span, cacheLimit: cfg.CacheEntities, rollups: p.HasRollups(),
		parts: map[int32]*partition{}, storages: map[int32]storage.Storage{}, resumes: map[int32]map[originKey]int64{}}
	if cfg.Tables != nil {
		e.SetTables(cfg.Tables)
	}
	return e, nil
}

// SetTables gives the engine the tables its joins look up (package processors opens them for each
// run of its group, before the group's first callback).
func (e *Engine) SetTables(t Tables) { e.tables.Store(&t) }

// SetPartitions tells the engine how many partitions the group has, so that a partition can send
// itself messages (under its tick key). Call it before the group runs.
func (e *Engine) SetPartitions(n int) {
	e.mu.Lock()
	e.tickKeys = TickKeys(n)
	e.mu.Unlock()
}

// Plan is the plan the engine runs.
func (e *Engine) Plan() *plan.Plan { return e.plan }

// SetStorage records the local table storage of a partition, from which the partition's close
// schedule is rebuilt after an assignment (goka's storage builder calls it).
func (e *Engine) SetStorage(part int32, st storage.Storage) {
	e.mu.Lock()
	e.storages[part] = st
	if pt := e.parts[part]; pt != nil {
		pt.tbl = st
	}
	e.mu.Unlock()
}

// Resumed tells the engine the offset the group resumes a source topic's partition from: its
// committed offset, below which every record was processed and everything written for it
// acknowledged (package processors commits in order). The partition's done offset of that input
// starts below it, so that an entity left with nothing leaves the table after a restart even if
// no record of its partition comes any more. It may be called before the partition's first
// callback of a session or while it runs; an offset below zero (nothing committed) or of a topic
// that is not a source is ignored.
func (e *Engine) Resumed(topic string, partition int32, offset int64) {
	if offset <= 0 {
		return
	}
	for i, s := range e.plan.Sources {
		if s.Topic != topic || s.Repartition {
			continue
		}
		e.mu.Lock()
		if e.resumes[partition] == nil {
			e.resumes[partition] = map[originKey]int64{}
		}
		k := originKey{e.topicIDs[i], partition}
		e.resumes[partition][k] = max(e.resumes[partition][k], offset)
		e.mu.Unlock()
		e.resumeGen.Add(1)
	}
}

// takeResumes moves the offsets Resumed gave for the partition into its origins' done offsets.
func (pt *partition) takeResumes() {
	gen := pt.e.resumeGen.Load()
	if gen == pt.resumeGen {
		return
	}
	pt.resumeGen = gen
	pt.e.mu.Lock()
	rs := pt.e.resumes[pt.id]
	delete(pt.e.resumes, pt.id)
	pt.e.mu.Unlock()
	for k, next := range rs {
		if og := pt.originOf(k); og.done < next-1 {
			og.done = next - 1
			pt.metaDirty = true // the record should say so: entities it covers may leave
		}
	}
}

// Rebalanced keeps the in-memory view of the partitions this instance keeps and forgets the
// others: a partition that comes back later is rebuilt from its table.
func (e *Engine) Rebalanced(a goka.Assignment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.parts {
		if _, kept := a[id]; kept {
			continue
		}
		label := strconv.Itoa(int(id))
		for _, g := range []*prometheus.GaugeVec{e.m.windowsOpen, e.m.windowsHeld, e.m.streamTimeLag, e.m.entities, e.m.scheduled, e.m.waiting} {
			g.DeleteLabelValues(label)
		}
		delete(e.parts, id)
	}
	e.log.Info("assignment", "partitions", len(a))
}

// Edges are the goka group graph edges of the engine's inputs, loop and table; the caller adds
// the outputs (OutputTopics).
func (e *Engine) Edges() []goka.Edge {
	var edges []goka.Edge
	for i, s := range e.plan.Sources {
		edges = append(edges, goka.Input(goka.Stream(s.Topic), new(codec.Bytes), e.onSource(i)))
	}
	return append(edges, goka.Loop(new(codec.Bytes), e.onLoop), goka.Persist(state.Codec{}))
}

// SourceCallback is the goka callback of source i (what Edges wires), for drivers that call it
// themselves.
func (e *Engine) SourceCallback(i int) goka.ProcessCallback { return e.onSource(i) }

// LoopCallback is the goka callback of the loop topic (what Edges wires).
func (e *Engine) LoopCallback() goka.ProcessCallback { return e.onLoop }

// OutputTopics are the topics the engine emits to: totals, dead-letter and, if set, late.
func (e *Engine) OutputTopics() []string {
	out := []string{e.plan.TotalsTopic, e.plan.DeadLetter}
	if e.plan.LateTopic != "" {
		out = append(out, e.plan.LateTopic)
	}
	return out
}
