package backfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/memtable"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/state"
)

// runAll runs each source partition's facts through an engine of its own, in turn: a partition's
// windows depend on its own events only (no rollup is run), so one partition's state is in memory
// at a time.
func (b *backfill) runAll(ctx context.Context) error {
	top := int32(-1)
	for p := range b.parts {
		top = max(top, p)
	}
	if b.nParts == 0 {
		b.nParts = int(top) + 1
	}
	if int(top) >= b.nParts {
		return fmt.Errorf("backfill: facts name partition %d of the source, which has %d", top, b.nParts)
	}
	ps := make([]int32, 0, len(b.parts))
	for p := range b.parts {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		facts := b.parts[p]
		delete(b.parts, p) // the partition's facts go with its run
		if err := b.runPartition(ctx, p, facts); err != nil {
			return err
		}
		b.sum.Partitions++
		b.report("write")
	}
	return nil
}

// runPartition feeds one partition's facts to a fresh engine in offset order, then closes what is
// left open as an idle partition would.
func (b *backfill) runPartition(ctx context.Context, part int32, facts []fact) error {
	slices.SortFunc(facts, func(x, y fact) int {
		switch {
		case x.offset < y.offset:
			return -1
		case x.offset > y.offset:
			return 1
		}
		return 0
	})
	src := b.plan.Sources[0]
	r := &run{b: b, ctx: ctx, part: part, table: memtable.New(), topic: src.Topic, loop: plan.LoopTopic(b.plan.Name)}
	if !src.Repartition {
		for _, f := range facts {
			if q := partitioner.Partition([]byte(f.entity), int32(b.nParts)); q != part {
				return fmt.Errorf("backfill: entity %q was in source partition %d, where goka's partitioner puts it in %d of %d: say the source topic's partition count", f.entity, part, q, b.nParts)
			}
		}
	}
	// The wall clock stays still while the facts go in: nothing is idle, nothing is retained by
	// time. It then jumps past every window, and ticks close what is open.
	var last int64
	for _, f := range facts {
		last = max(last, f.time)
	}
	r.now = time.UnixMilli(b.from)
	eng, err := engine.New(b.plan, engine.Config{IdleTimeout: engine.DefaultIdleTimeout, FinalRetention: engine.DefaultFinalRetention,
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return r.now },
		Output: r.output, CacheEntities: -1})
	if err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	eng.SetPartitions(b.nParts)
	eng.SetStorage(part, r.table)
	r.source, r.onLoop, r.tickKey = eng.SourceCallback(0), eng.LoopCallback(), engine.TickKeys(b.nParts)[part]
	for i, f := range facts {
		if err := r.deliver(r.topic, f.offset, f.entity, f.value, time.UnixMilli(f.time), r.source); err != nil {
			return err
		}
		facts[i].value = nil
		if i%10000 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	// Idle: past the idle timeout, twice (a quiet origin, then the whole partition), then past
	// the last window, closed by the wall clock.
	horizon := time.UnixMilli(max(last, b.until)).Add(engine.DefaultIdleTimeout)
	for _, step := range []time.Duration{0, 2 * engine.DefaultIdleTimeout, 4 * engine.DefaultIdleTimeout, 24 * time.Hour} {
		r.now = horizon.Add(step + b.spanOf())
		if err := r.tick(); err != nil {
			return err
		}
	}
	return nil
}

// spanOf is how far after an event its last window closes (the engine's own bound), 0 for
// sessions.
func (b *backfill) spanOf() time.Duration {
	var span int64
	for _, s := range b.plan.Sets {
		span = max(span, s.Window.Size()+s.Grace)
	}
	return time.Duration(span) * time.Millisecond
}

// run is one partition's engine run: its table, its loop messages and its output.
type run struct {
	b       *backfill
	ctx     context.Context
	part    int32
	table   *memtable.Table
	topic   string
	loop    string
	tickKey string
	now     time.Time
	source  goka.ProcessCallback
	onLoop  goka.ProcessCallback
	queue   []loopMsg
	loopOff int64
	err     error
}

type loopMsg struct {
	key   string
	value []byte
}

// deliver runs a callback for one record, then the loop messages it sent, as goka would.
func (r *run) deliver(topic string, offset int64, key string, value []byte, ts time.Time, cb goka.ProcessCallback) error {
	if err := r.call(topic, offset, key, value, ts, cb); err != nil {
		return err
	}
	for len(r.queue) > 0 {
		m := r.queue[0]
		r.queue = r.queue[1:]
		r.loopOff++
		if err := r.call(r.loop, r.loopOff, m.key, m.value, r.now, r.onLoop); err != nil {
			return err
		}
	}
	return r.err
}

// tick sends the partition one tick now.
func (r *run) tick() error {
	r.loopOff++
	return r.deliver(r.loop, r.loopOff, r.tickKey, engine.TickMessage(), r.now, r.onLoop)
}

func (r *run) call(topic string, offset int64, key string, value []byte, ts time.Time, cb goka.ProcessCallback) (err error) {
	c := &runContext{r: r, topic: topic, offset: offset, key: key, ts: ts}
	defer func() {
		if x := recover(); x != nil {
			var f failure
			if e, ok := x.(error); ok && errors.As(e, &f) {
				err = fmt.Errorf("backfill: the engine stopped on partition %d at offset %d: %w", r.part, offset, f.err)
				return
			}
			panic(x)
		}
	}()
	cb(c, value)
	return r.err
}

// output takes what the engine emits: totals to the table, the rest counted.
func (r *run) output(_ goka.Context, topic, _ string, value []byte, _ goka.Headers) {
	switch {
	case r.err != nil:
	case topic == r.b.plan.TotalsTopic:
		r.err = r.b.emit(r.ctx, r.part, value)
	case topic == r.b.plan.DeadLetter:
		r.b.sum.DeadLetters++
	}
}

// failure is how the context's Fail leaves the callback, as goka's does.
type failure struct{ err error }

func (f failure) Error() string { return f.err.Error() }

// runContext is goka.Context over a run's table and loop.
type runContext struct {
	r      *run
	topic  string
	offset int64
	key    string
	ts     time.Time
}

func (c *runContext) Topic() goka.Stream       { return goka.Stream(c.topic) }
func (c *runContext) Key() string              { return c.key }
func (c *runContext) Partition() int32         { return c.r.part }
func (c *runContext) Offset() int64            { return c.offset }
func (c *runContext) Group() goka.Group        { return goka.Group(c.r.b.plan.Name) }
func (c *runContext) Headers() goka.Headers    { return nil }
func (c *runContext) Timestamp() time.Time     { return c.ts }
func (c *runContext) Context() context.Context { return c.r.ctx }
func (c *runContext) DeferCommit() func(error) { return func(error) {} }
func (c *runContext) Fail(err error)           { panic(failure{err}) }

func (c *runContext) Value() any {
	b, _ := c.r.table.Get(c.key)
	if b == nil {
		return nil
	}
	v, err := state.Codec{}.Decode(b)
	if err != nil {
		c.Fail(fmt.Errorf("decode state of %q: %w", c.key, err))
	}
	return v
}

func (c *runContext) SetValue(v any, _ ...goka.ContextOption) {
	b, err := state.Codec{}.Encode(v)
	if err != nil {
		c.Fail(err)
	}
	_ = c.r.table.Set(c.key, b)
}

func (c *runContext) Delete(_ ...goka.ContextOption) { _ = c.r.table.Delete(c.key) }

func (c *runContext) Emit(topic goka.Stream, key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	c.r.output(c, string(topic), key, b, nil)
}

// Loopback queues a loop message: those for this partition's keys run after the callback; a
// message for another partition (none without rollups) is dropped.
func (c *runContext) Loopback(key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	if partitioner.Partition([]byte(key), int32(c.r.b.nParts)) == c.r.part {
		c.r.queue = append(c.r.queue, loopMsg{key, b})
	}
}

func (c *runContext) Join(goka.Table) any {
	c.Fail(errors.New("backfill: Join is not used by abacus"))
	return nil
}

func (c *runContext) Lookup(goka.Table, string) any {
	c.Fail(errors.New("backfill: Lookup is not used by abacus"))
	return nil
}

var _ goka.Context = (*runContext)(nil)
