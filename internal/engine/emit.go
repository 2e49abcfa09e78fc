package engine

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/totals"
)

// emitUpdate emits a window's running total if the set's emission policy wants one now.
func (e *Engine) emitUpdate(ctx goka.Context, entity string, set *plan.Set, w *state.Window, accs []plan.Accumulator, now time.Time) {
	switch set.Emit {
	case plan.EmitEveryUpdate:
	case plan.EmitEarly:
		if w.LastEmit != 0 && now.Sub(time.UnixMilli(w.LastEmit)) < set.EmitEvery {
			return
		}
		w.LastEmit = now.UnixMilli()
	default:
		return
	}
	e.emit(ctx, entity, set, w, accs, false)
}

// emit writes one window total to the totals topic, keyed by entity.
func (e *Engine) emit(ctx goka.Context, entity string, set *plan.Set, w *state.Window, accs []plan.Accumulator, final bool) {
	r := totals.Record{Topology: e.plan.Name, Set: set.Name, Entity: entity, Start: w.Start, End: w.End,
		Final: final, Revision: w.Revision, Values: make([]totals.Value, len(accs))}
	for k, a := range accs {
		v := a.Value()
		v.Name = set.Aggs[k].Name
		r.Values[k] = v
	}
	ctx.Emit(goka.Stream(e.plan.TotalsTopic), entity, r.Encode())
	e.m.emitted.WithLabelValues(set.Name, strconv.FormatBool(final)).Inc()
}

// late counts an event that came after its windows of set closed, and routes it to the late topic
// if the topology has one.
func (e *Engine) late(ctx goka.Context, raw []byte, set *plan.Set, src deadletter.Source) {
	if e.plan.LateTopic == "" {
		e.m.lateDropped.WithLabelValues(set.Name).Inc()
		return
	}
	e.setAside(ctx, e.plan.LateTopic, deadletter.Record{Source: src, Reason: deadletter.Late,
		Detail: "the event came after its window of " + set.Name + " closed", Set: set.Name, Value: raw})
	e.m.lateRouted.WithLabelValues(set.Name).Inc()
}

// deadLetter sends a record the engine cannot process to the dead-letter topic with its reason.
func (e *Engine) deadLetter(ctx goka.Context, raw []byte, reason deadletter.Reason, detail string, src deadletter.Source) {
	e.setAside(ctx, e.plan.DeadLetter, deadletter.Record{Source: src, Reason: reason, Detail: detail, Value: raw})
	e.m.deadLettered.WithLabelValues(string(reason)).Inc()
}

// setAside emits a dead-letter or late record, keyed by its source, with the callback's record's
// key, timestamp and headers as the original's when the record is the callback's own (not one
// re-keyed through the loop topic, whose original key and headers stayed at the source).
func (e *Engine) setAside(ctx goka.Context, topic string, r deadletter.Record) {
	if string(ctx.Topic()) == r.Source.Topic && ctx.Partition() == r.Source.Partition && ctx.Offset() == r.Source.Offset {
		r.Key = []byte(ctx.Key())
		r.Timestamp = ctx.Timestamp()
		for k, v := range ctx.Headers() {
			r.Headers = append(r.Headers, deadletter.Header{Key: k, Value: v})
		}
		slices.SortFunc(r.Headers, func(a, b deadletter.Header) int { return strings.Compare(a.Key, b.Key) })
	}
	hs := goka.Headers{}
	for _, h := range r.RecordHeaders() {
		hs[h.Key] = h.Value
	}
	ctx.Emit(goka.Stream(topic), string(r.RecordKey()), r.Value, goka.WithCtxEmitHeaders(hs))
}

// sourceOf is the position of the callback's record.
func sourceOf(ctx goka.Context) deadletter.Source {
	return deadletter.Source{Topic: string(ctx.Topic()), Partition: ctx.Partition(), Offset: ctx.Offset()}
}
