// Package engine applies a topology's events to per-entity windows and emits their totals: the
// part of the processor that does not depend on how it is deployed. It runs inside goka callbacks
// (goka.Context, goka storage): package processors wires it into a goka processor group on Kafka,
// package abacustest runs it in memory for users' tests, so both run exactly this code.
//
// It must never apply a source record to an entity twice (every entity keeps an offset fence per
// source partition), never read event time from a clock, and never write anywhere but through its
// goka context: the sinks turn totals into HBase cells on their own consumers.
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
// cleanly the local tables are discarded and rebuilt from the changelog (package processors), the
// one copy that is a consistent prefix of the partition's history; the stream time rebuilt from
// it is then exactly the one the replay resumes from, so replayed events are judged late or on
// time as before.
package engine

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
)

// Config is what the engine needs of the processor's configuration. Every field is required
// (package processors fills them from its defaults).
type Config struct {
	// IdleTimeout is how long a partition may see no event before its stream time follows the
	// wall clock at ticks.
	IdleTimeout time.Duration
	// FinalRetention is how long (wall clock) a closed window stays in the table after its final
	// total was emitted.
	FinalRetention time.Duration
	// Registerer receives the engine's metrics.
	Registerer prometheus.Registerer
	// Logger receives the engine's logs.
	Logger *slog.Logger
	// Now is the wall clock: future skew, idle timeout, early firings and retention. Event time
	// never comes from it.
	Now func() time.Time
}

// Engine runs one topology's windows over the partitions of one goka group.
type Engine struct {
	plan *plan.Plan
	cfg  Config
	m    *metrics
	log  *slog.Logger

	mu       sync.Mutex
	parts    map[int32]*partition
	storages map[int32]storage.Storage
}

// New prepares an engine for the plan.
func New(p *plan.Plan, cfg Config) (*Engine, error) {
	if len(p.Sets) > math.MaxUint16 {
		return nil, fmt.Errorf("engine: %d aggregate sets, at most %d", len(p.Sets), math.MaxUint16)
	}
	m, err := newMetrics(cfg.Registerer, p.Name)
	if err != nil {
		return nil, fmt.Errorf("engine: register metrics: %w", err)
	}
	return &Engine{plan: p, cfg: cfg, m: m, log: cfg.Logger, parts: map[int32]*partition{}, storages: map[int32]storage.Storage{}}, nil
}

// Plan is the plan the engine runs.
func (e *Engine) Plan() *plan.Plan { return e.plan }

// SetStorage records the local table storage of a partition, from which the partition's close
// schedule is rebuilt after an assignment (goka's storage builder calls it).
func (e *Engine) SetStorage(part int32, st storage.Storage) {
	e.mu.Lock()
	e.storages[part] = st
	e.mu.Unlock()
}

// Rebalanced forgets the in-memory partition state: whatever partitions the new assignment brings
// are rebuilt from their storage at their first callback.
func (e *Engine) Rebalanced(a goka.Assignment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.parts {
		label := strconv.Itoa(int(id))
		e.m.windowsOpen.DeleteLabelValues(label)
		e.m.windowsHeld.DeleteLabelValues(label)
		e.m.streamTimeLag.DeleteLabelValues(label)
	}
	e.parts = map[int32]*partition{}
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

// OutputTopics are the topics the engine emits to: totals, dead-letter and, if set, late.
func (e *Engine) OutputTopics() []string {
	out := []string{e.plan.TotalsTopic, e.plan.DeadLetter}
	if e.plan.LateTopic != "" {
		out = append(out, e.plan.LateTopic)
	}
	return out
}

func (e *Engine) fail(ctx goka.Context, err error) {
	e.log.Error("processor callback failed", "key", ctx.Key(), "topic", ctx.Topic(), "partition", ctx.Partition(), "offset", ctx.Offset(), "err", err)
	ctx.Fail(err)
}

func (e *Engine) onSource(idx int) goka.ProcessCallback {
	src := e.plan.Sources[idx]
	return func(ctx goka.Context, msg any) {
		pt, err := e.partition(ctx.Partition())
		if err != nil {
			e.fail(ctx, err)
			return
		}
		pt.lastInput = e.cfg.Now() // apply reads it back as its wall clock
		pt.eventsIn[idx].Inc()
		raw, _ := msg.([]byte)
		ev, err := src.Decode(raw)
		if err != nil {
			e.deadLetter(ctx, raw, deadletter.Undecodable, err.Error(), sourceOf(ctx))
			return
		}
		entity := src.Entity(ev)
		if src.Repartition {
			m := &loopMsg{kind: loopEvent, source: idx, topic: string(ctx.Topic()), partition: ctx.Partition(), offset: ctx.Offset(), value: raw}
			ctx.Loopback(entity, m.encode())
			return
		}
		if entity != ctx.Key() {
			e.deadLetter(ctx, raw, deadletter.EntityNotKey,
				fmt.Sprintf("entity %q differs from the record key %q: declare the source with Repartition()", entity, ctx.Key()),
				sourceOf(ctx))
			return
		}
		pt.apply(ctx, src, sourceOf(ctx), raw, ev)
	}
}

func (e *Engine) onLoop(ctx goka.Context, msg any) {
	pt, err := e.partition(ctx.Partition())
	if err != nil {
		e.fail(ctx, err)
		return
	}
	raw, _ := msg.([]byte)
	m, err := decodeLoop(raw)
	if err != nil {
		// Only this processor writes the loop topic: a corrupt message is a bug, not bad input.
		e.fail(ctx, fmt.Errorf("loop message at %d/%d: %w", ctx.Partition(), ctx.Offset(), err))
		return
	}
	switch m.kind {
	case loopTick:
		if IsTickKey(ctx.Key()) {
			pt.onTick(ctx)
		}
	case loopClose:
		pt.onClose(ctx)
	case loopEvent:
		if m.source < 0 || m.source >= len(e.plan.Sources) {
			e.fail(ctx, fmt.Errorf("loop event names source %d of %d", m.source, len(e.plan.Sources)))
			return
		}
		src := e.plan.Sources[m.source]
		pt.lastInput = e.cfg.Now() // apply reads it back as its wall clock
		ev, err := src.Decode(m.value)
		if err != nil {
			e.deadLetter(ctx, m.value, deadletter.Undecodable, err.Error(), m.origin())
			return
		}
		pt.apply(ctx, src, m.origin(), m.value, ev)
	}
}

// value reads the entity state of the callback's key.
func value(ctx goka.Context) (*state.Entity, error) {
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
