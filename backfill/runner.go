package backfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/internal/engine"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
)

// runAll runs every source partition's facts, each partition's in offset order, through one
// engine over all partitions, as a processor group with one member would: rollup partials and
// progress cross partitions through an in-memory loop. Partitions are interleaved by event time,
// which keeps progress moving and state small; any interleaving gives the same windows.
func (b *backfill) runAll(ctx context.Context, resume *checkpointState) error {
	src := b.plan.Sources[0]
	r := &run{b: b, ctx: ctx, tables: make([]*table, b.nParts), heads: make([]*stream, b.nParts), topic: src.Topic,
		loop: plan.LoopTopic(b.plan.Name), loopOff: make([]int64, b.nParts), next: make([]int64, b.nParts)}
	for p := range r.next {
		r.next[p] = minInt64
	}
	defer func() {
		for _, s := range r.heads {
			if s != nil {
				s.close()
			}
		}
	}()
	for _, p := range b.facts.partitions() {
		s, err := b.facts.stream(p)
		if err != nil {
			return err
		}
		r.heads[p] = s
	}
	last := b.last
	// The wall clock stays still while the facts go in: nothing is idle, nothing is retained by
	// time. It then jumps past every window, and ticks close what is open.
	r.now = time.UnixMilli(max(b.readFrom, minTime))
	eng, err := engine.New(b.plan, engine.Config{IdleTimeout: engine.DefaultIdleTimeout, FinalRetention: engine.DefaultFinalRetention,
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return r.now },
		Output: func(c goka.Context, topic, key string, value []byte, h goka.Headers) {
			c.(*runContext).r.output(c, topic, key, value, h) // the run of the callback: one per worker
		}, Tables: b.opts.Tables})
	if err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	eng.SetPartitions(b.nParts)
	for p := range r.tables {
		if b.opts.Share.mine(int32(p)) {
			r.tables[p] = newTable()
			eng.SetStorage(int32(p), r.tables[p])
		}
	}
	r.source, r.onLoop, r.tickKeys = eng.SourceCallback(0), eng.LoopCallback(), engine.TickKeys(b.nParts)
	if resume != nil {
		if err := r.resume(eng, resume); err != nil {
			return err
		}
	}
	b.sum.Parallel = b.parallel(r)
	if b.sum.Parallel {
		err = b.runParallel(ctx, r)
	} else {
		err = b.runSerial(ctx, r)
	}
	if err != nil {
		return err
	}
	// Idle: past the idle timeout, a few times (a quiet origin, then the whole partition, then
	// what the rollup owners learn), then past the last window, closed by the wall clock.
	end := last
	if b.until != maxInt64 {
		end = max(end, b.until)
	}
	horizon := time.UnixMilli(end).Add(b.spanOf() + engine.DefaultIdleTimeout)
	for i := range 8 {
		r.now = horizon.Add(time.Duration(i+1) * 2 * engine.DefaultIdleTimeout)
		if err := r.tick(); err != nil {
			return err
		}
	}
	return nil
}

// runSerial runs the facts of every partition in one goroutine, the earliest in event time
// first: rollups and re-keyed events cross partitions through the loop.
func (b *backfill) runSerial(ctx context.Context, r *run) error {
	saved, every := time.Now(), b.checkpointEvery()
	for n := 1; ; n++ {
		p := r.earliest()
		if p < 0 {
			break
		}
		f := r.heads[p].peek()
		if err := r.deliver(r.topic, p, f.offset, f.entity, f.value, time.UnixMilli(f.time), r.source); err != nil {
			return err
		}
		r.next[p] = f.offset + 1
		if err := r.heads[p].advance(); err != nil {
			return err
		}
		b.sum.Applied++
		if r.heads[p].peek() == nil {
			b.sum.Partitions++
		}
		if n%tickEvery == 0 && b.rollups() {
			if err := r.tick(); err != nil {
				return err
			}
		}
		if n%progressEvery == 0 {
			b.report("run")
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if b.opts.Checkpoints != nil && n%checkEvery == 0 && time.Since(saved) >= every {
			if err := b.saveCheckpoint(ctx, r.snapshot()); err != nil {
				return err
			}
			b.report("checkpoint")
			saved = time.Now()
		}
	}
	return nil
}

// checkpointEvery is how often a run saves a checkpoint.
func (b *backfill) checkpointEvery() time.Duration {
	if cp := b.opts.Checkpoints; cp != nil && cp.Every > 0 {
		return cp.Every
	}
	return time.Minute
}

// tickEvery is how many facts go between two ticks of every partition, in a run with rollups.
// The wall clock stands still, so a tick advances nothing by time; but it writes each partition's
// record, as the processor's ticks do, and a rollup owner drops a closed window only once the
// records hold the progress that completed it. Without ticks an owner kept every window of the
// run: a month of fleet minutes passed MaxMessageBytes, and its partials were then dead-lettered
// as too large.
const tickEvery = 1000

// progressEvery is how many facts go between two progress reports.
const progressEvery = 20000

// checkEvery is how many facts go between two looks at the clock for a checkpoint.
const checkEvery = 1000

// resume starts the run where a checkpoint left it: the state back in the tables, and each
// partition's facts up to the checkpoint's position passed over.
func (r *run) resume(eng *engine.Engine, st *checkpointState) error {
	if err := r.restore(st); err != nil {
		return err
	}
	for p, h := range r.heads {
		if h == nil {
			continue
		}
		for f := h.peek(); f != nil && f.offset < r.next[p]; f = h.peek() {
			if err := h.advance(); err != nil {
				return err
			}
			r.b.sum.Resumed++
		}
		if h.peek() == nil {
			r.b.sum.Partitions++
		}
		// As a processor restarted at the partition's committed offset is told.
		eng.Resumed(r.topic, int32(p), r.next[p])
	}
	return nil
}

// minTime bounds the wall clock backfill starts with: time.UnixMilli takes any int64, but a
// clock near its ends would overflow the engine's own arithmetic.
const minTime = -1 << 50

// earliest is the partition whose next fact is the earliest in event time, -1 when none is left.
func (r *run) earliest() int32 {
	best := int32(-1)
	var bt int64
	for p, h := range r.heads {
		if h == nil {
			continue
		}
		if f := h.peek(); f != nil && (best < 0 || f.time < bt) {
			best, bt = int32(p), f.time
		}
	}
	return best
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

// run is the engine's run: its tables, its loop and its output.
type run struct {
	b        *backfill
	ctx      context.Context
	tables   []*table
	heads    []*stream // per partition, the facts not yet delivered
	topic    string
	loop     string
	tickKeys []string
	now      time.Time
	source   goka.ProcessCallback
	onLoop   goka.ProcessCallback
	queue    []loopMsg
	loopOff  []int64 // per partition, the loop topic's next offset
	next     []int64 // per partition, the offset of its first fact not run yet (minInt64: none run)
	part     int32   // the partition of the callback running
	worker   bool    // runs partition only, beside other workers (runParallel)
	only     int32
	err      error
}

type loopMsg struct {
	partition int32
	key       string
	value     []byte
}

// deliver runs a callback for one record, then the loop messages it sent, and those they send,
// as goka would.
func (r *run) deliver(topic string, part int32, offset int64, key string, value []byte, ts time.Time, cb goka.ProcessCallback) error {
	if err := r.call(topic, part, offset, key, value, ts, cb); err != nil {
		return err
	}
	for len(r.queue) > 0 {
		m := r.queue[0]
		r.queue = r.queue[1:]
		off := r.loopOff[m.partition]
		r.loopOff[m.partition]++
		if err := r.call(r.loop, m.partition, off, m.key, m.value, r.now, r.onLoop); err != nil {
			return err
		}
	}
	return r.err
}

// tick sends every partition one tick now.
func (r *run) tick() error {
	for p, k := range r.tickKeys {
		if r.tables[p] != nil {
			r.queue = append(r.queue, loopMsg{int32(p), k, engine.TickMessage()})
		}
	}
	m := r.queue[0]
	r.queue = r.queue[1:]
	off := r.loopOff[m.partition]
	r.loopOff[m.partition]++
	return r.deliver(r.loop, m.partition, off, m.key, m.value, r.now, r.onLoop)
}

func (r *run) call(topic string, part int32, offset int64, key string, value []byte, ts time.Time, cb goka.ProcessCallback) (err error) {
	r.part = part
	c := &runContext{r: r, topic: topic, part: part, offset: offset, key: key, ts: ts}
	defer func() {
		if x := recover(); x != nil {
			var f failure
			if e, ok := x.(error); ok && errors.As(e, &f) {
				err = fmt.Errorf("backfill: the engine stopped on partition %d at offset %d of %s: %w", part, offset, topic, f.err)
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
	if mu := r.b.emitMu; mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
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

// runContext is goka.Context over a run's tables and loop.
type runContext struct {
	r      *run
	topic  string
	part   int32
	offset int64
	key    string
	ts     time.Time
}

func (c *runContext) Topic() goka.Stream       { return goka.Stream(c.topic) }
func (c *runContext) Key() string              { return c.key }
func (c *runContext) Partition() int32         { return c.part }
func (c *runContext) Offset() int64            { return c.offset }
func (c *runContext) Group() goka.Group        { return goka.Group(c.r.b.plan.Name) }
func (c *runContext) Headers() goka.Headers    { return nil }
func (c *runContext) Timestamp() time.Time     { return c.ts }
func (c *runContext) Context() context.Context { return c.r.ctx }
func (c *runContext) DeferCommit() func(error) { return func(error) {} }
func (c *runContext) Fail(err error)           { panic(failure{err}) }

func (c *runContext) Value() any {
	v, err := c.r.tables[c.part].value(c.key)
	if err != nil {
		c.Fail(fmt.Errorf("decode state of %q: %w", c.key, err))
	}
	return v
}

func (c *runContext) SetValue(v any, _ ...goka.ContextOption) {
	if err := c.r.tables[c.part].setValue(c.key, v); err != nil {
		c.Fail(err)
	}
}

func (c *runContext) Delete(_ ...goka.ContextOption) { _ = c.r.tables[c.part].Delete(c.key) }

func (c *runContext) Emit(topic goka.Stream, key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	c.r.output(c, string(topic), key, b, nil)
}

// Loopback queues a loop message for the partition of its key: it runs after the callback.
func (c *runContext) Loopback(key string, value any, _ ...goka.ContextOption) {
	b, _ := value.([]byte)
	p := partitioner.Partition([]byte(key), int32(len(c.r.tables)))
	if c.r.worker && p != c.r.only {
		c.r.err = crossing(c.r.only, p)
		return
	}
	if c.r.tables[p] == nil {
		return // another worker's partition (Share): only rollups send there, and a share runs none
	}
	c.r.queue = append(c.r.queue, loopMsg{p, key, b})
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

// rollups reports whether the run computes a rollup set.
func (b *backfill) rollups() bool {
	for _, s := range b.plan.Sets {
		if s.Rollup != nil {
			return true
		}
	}
	return false
}
