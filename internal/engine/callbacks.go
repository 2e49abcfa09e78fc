package engine

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
)

// fail stops the processor: only for what no record caused (corrupt state, a bug, a write Kafka
// refused). It never returns. goka's Fail panics to leave the callback, and guard lets that
// panic through; but once the processor is stopping (another partition failed first) goka's
// Fail only notes the error and returns, and a callback that then returned normally would have
// its record committed as processed, though nothing of it was written: the record would be
// lost. So fail panics itself after Fail, which goka takes as the callback's failure too.
func (e *Engine) fail(ctx goka.Context, err error) {
	e.log.Error("processor callback failed", "key", ctx.Key(), "topic", ctx.Topic(), "partition", ctx.Partition(), "offset", ctx.Offset(), "err", err)
	f := &failure{err}
	ctx.Fail(f)
	panic(f)
}

// failure is an error the engine stops on, told apart from a panic of user code.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }

func (f *failure) Unwrap() error { return f.err }

// guard runs f, which applies one record; if user code in it (a codec, an extractor, an
// aggregation) panics, the record goes to the dead-letter topic and processing goes on.
func (e *Engine) guard(ctx goka.Context, raw []byte, at recordAt, f func()) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		var f *failure
		if err, ok := r.(error); ok && errors.As(err, &f) {
			panic(r) // the engine failing, not user code
		}
		e.m.panics.WithLabelValues("record").Inc()
		e.log.Error("user code panicked on a record: dead-lettered", "source", at.String(), "panic", r, "stack", string(debug.Stack()))
		// The panic may have come from an aggregation, after the record's replay check: a replay
		// would find it fenced by its entity's next write and never panic again.
		e.deadLetterFenced(ctx, raw, deadletter.Panic, fmt.Sprint(r), at)
	}()
	f()
}

// checkKey dead-letters a record whose entity cannot be a key of the state, and reports whether
// it did.
func (e *Engine) checkKey(ctx goka.Context, raw []byte, key string, at recordAt) bool {
	switch {
	case key == "":
		e.deadLetter(ctx, raw, deadletter.NoEntity, "the record has no key and its event no entity", at)
	case plan.ReservedKey(key):
		e.deadLetter(ctx, raw, deadletter.ReservedKey, fmt.Sprintf("entity %q is a key the state keeps for itself", key), at)
	case len(key) > e.plan.MaxEntityBytes:
		e.deadLetter(ctx, raw, deadletter.TooLarge, fmt.Sprintf("entity of %d bytes, more than the limit of %d", len(key), e.plan.MaxEntityBytes), at)
	default:
		return false
	}
	return true
}

func (e *Engine) onSource(idx int) goka.ProcessCallback {
	src := e.plan.Sources[idx]
	tid := e.topicIDs[idx]
	return func(ctx goka.Context, msg any) {
		pt, err := e.partition(ctx.Partition())
		if err != nil {
			e.fail(ctx, err)
			return
		}
		pt.takeResumes()
		pt.catchUp(ctx)
		pt.nudge(ctx)
		pt.eventsIn[idx].Inc()
		raw, _ := msg.([]byte)
		at := sourceOf(ctx)
		if !src.Repartition {
			k := originKey{tid, ctx.Partition()}
			if pt.replayed(k, at.Offset) {
				return
			}
			defer pt.processed(k, at.Offset)
		}
		if len(raw) > e.plan.MaxRecordBytes {
			e.deadLetter(ctx, raw, deadletter.TooLarge, fmt.Sprintf("record of %d bytes, more than the limit of %d", len(raw), e.plan.MaxRecordBytes), at)
			return
		}
		if !src.Repartition && e.checkKey(ctx, raw, ctx.Key(), at) {
			return
		}
		e.guard(ctx, raw, at, func() {
			ev, err := src.Decode(raw)
			if err != nil {
				e.deadLetter(ctx, raw, deadletter.Undecodable, err.Error(), at)
				return
			}
			entity := src.Entity(ev)
			if src.Repartition {
				if e.checkKey(ctx, raw, entity, at) {
					return
				}
				m := &loopMsg{kind: loopEvent, source: idx, topic: string(ctx.Topic()), partition: ctx.Partition(), offset: ctx.Offset(),
					timestamp: ctx.Timestamp().UnixMilli(), value: raw}
				ctx.Loopback(entity, m.encode())
				return
			}
			if entity != ctx.Key() {
				e.deadLetter(ctx, raw, deadletter.EntityNotKey,
					fmt.Sprintf("entity %q differs from the record key %q: declare the source with Repartition()", entity, ctx.Key()), at)
				return
			}
			pt.apply(ctx, src, originKey{tid, ctx.Partition()}, at, ctx.Timestamp(), raw, ev)
		})
	}
}

func (e *Engine) onLoop(ctx goka.Context, msg any) {
	pt, err := e.partition(ctx.Partition())
	if err != nil {
		e.fail(ctx, err)
		return
	}
	pt.takeResumes()
	pt.catchUp(ctx)
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
	case loopNudge:
		pt.nudged = false
		if (!pt.layoutHeld || pt.recordWanted) && pt.metaDirty && IsTickKey(ctx.Key()) {
			// A partition whose record does not describe the current layout yet writes it at once,
			// not at the next tick: until Kafka holds it, every entity written carries the
			// description itself.
			pt.writeRecord(ctx)
		}
		pt.nudge(ctx) // catchUp ran above; nudge again if closes still wait
	case loopPartial:
		pt.onPartial(ctx, m.partial)
	case loopProgress:
		if IsTickKey(ctx.Key()) {
			pt.onProgress(ctx, m)
		}
	case loopEvent:
		// The event's source is found by its topic: the source's position (which the message
		// carries too) may differ in another version of the topology.
		src := e.plan.SourceByTopic(m.topic)
		if src == nil || !src.Repartition {
			// Re-keyed by a version of the topology that had this source, and the current one has
			// it no more (or reads it without re-keying): nothing here can apply it.
			e.m.loopUnknown.WithLabelValues("event of topic " + m.topic).Inc()
			e.log.Warn("re-keyed event of a source this topology does not re-key: ignored", "topic", m.topic, "partition", m.partition, "offset", m.offset)
			return
		}
		k := originKey{state.TopicID(m.topic), m.partition}
		if pt.replayed(k, m.offset) {
			return
		}
		recordTime := ctx.Timestamp() // messages of earlier versions carry no timestamp of their own
		if m.timestamp != 0 {
			recordTime = time.UnixMilli(m.timestamp)
		}
		at := recordAt{m.origin(), recordTime}
		e.guard(ctx, m.value, at, func() {
			ev, err := src.Decode(m.value)
			if err != nil {
				e.deadLetter(ctx, m.value, deadletter.Undecodable, err.Error(), at)
				return
			}
			pt.apply(ctx, src, k, at, recordTime, m.value, ev)
		})
		pt.processed(k, at.Offset)
	}
}
