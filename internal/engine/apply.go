package engine

import (
	"fmt"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/windows"
)

// apply applies one source event to its entity, exactly once.
func (pt *partition) apply(ctx goka.Context, src *plan.Source, at deadletter.Source, raw []byte, ev plan.Event) {
	e := pt.e
	now := pt.lastInput
	t := src.EventTime(ev)
	if limit := now.Add(e.plan.MaxFutureSkew).UnixMilli(); t > limit {
		e.deadLetter(ctx, raw, deadletter.Future,
			fmt.Sprintf("event time %s is more than %v ahead of the wall clock", time.UnixMilli(t).UTC().Format(time.RFC3339Nano), e.plan.MaxFutureSkew),
			at)
		return
	}
	ent, err := value(ctx)
	if err != nil {
		e.fail(ctx, err)
		return
	}
	if ent == nil {
		ent = &state.Entity{}
	}
	if ent.Applied(at.Topic, at.Partition, at.Offset) {
		// A replay: the local table has this event, but what was sent to Kafka when it was
		// applied (the changelog write, totals) may have died with the process, and this
		// record's offset is about to be committed. Write the state again, so the changelog holds
		// it before the commit, and re-send the current totals (absolute, so resending is safe).
		pt.duplicates.Inc()
		ctx.SetValue(ent)
		pt.reemitUpdates(ctx, ent, src, t)
		return
	}
	pt.streamTime = max(pt.streamTime, t)
	before := len(ent.Windows)
	typ := src.Type(ev)
	changed := false
	for _, si := range src.Sets {
		set := e.plan.Sets[si]
		if !set.Accepts(typ) {
			continue
		}
		var applied bool
		var err error
		if set.Window.Kind() == windows.KindSession {
			applied, err = pt.addSession(ctx, ent, set, ev, t, now)
		} else {
			applied, err = pt.addFixed(ctx, ent, set, ev, t, now)
		}
		if err != nil {
			e.fail(ctx, fmt.Errorf("entity %q set %q: %w", ctx.Key(), set.Name, err))
			return
		}
		if applied {
			changed = true
			continue
		}
		e.late(ctx, raw, set, at)
	}
	if !changed {
		// Nothing but late windows: the state is unchanged, so the write is saved. A replay
		// routes the event to the late topic again (late and dead-letter routing is at least once).
		pt.closeDue(ctx)
		return
	}
	pt.windowsDelta(len(ent.Windows)-before, len(ent.Windows)-before)
	pt.prune(ctx.Key(), ent, now)
	ent.Advance(at.Topic, at.Partition, at.Offset)
	ent.StreamTime = pt.streamTime
	ctx.SetValue(ent)
	pt.schedule(ctx.Key(), ent)
	pt.lag.Set(float64(now.UnixMilli()-pt.streamTime) / 1000)
	pt.closeDue(ctx)
}

// addFixed applies ev to its tumbling or hopping windows that are still open, and reports whether
// it applied to any.
func (pt *partition) addFixed(ctx goka.Context, ent *state.Entity, set *plan.Set, ev plan.Event, t int64, now time.Time) (bool, error) {
	var buf [8]windows.Window
	applied := false
	for _, w := range set.Window.Assign(t, buf[:0]) {
		if w.Closed(set.Grace, pt.streamTime) {
			continue
		}
		i := ent.Find(set.Index, w.Start)
		accs, err := accumulators(set, ent, i)
		if err != nil {
			return false, err
		}
		if i < 0 {
			ent.Windows = append(ent.Windows, state.Window{Set: set.Index, Start: w.Start, End: w.End})
			i = len(ent.Windows) - 1
		}
		for _, a := range accs {
			a.Add(ev, t)
		}
		storeAccs(&ent.Windows[i], accs)
		ent.Windows[i].Revision++
		pt.e.emitUpdate(ctx, ctx.Key(), set, &ent.Windows[i], accs, now)
		applied = true
	}
	return applied, nil
}

// addSession merges ev's session [t, t+gap) with the entity's overlapping sessions of the set.
func (pt *partition) addSession(ctx goka.Context, ent *state.Entity, set *plan.Set, ev plan.Event, t int64, now time.Time) (bool, error) {
	var idx []int
	var open []windows.Window
	for i, w := range ent.Windows {
		// A session that stream time has closed (its close message may still be in flight) is
		// final: a new event must not reopen it, whether or not the close has been handled yet.
		if w.Set == set.Index && !w.Span().Closed(set.Grace, pt.streamTime) {
			idx = append(idx, i)
			open = append(open, w.Span())
		}
	}
	merged, absorbed := windows.MergeSession(open, set.Window.Assign(t, nil)[0])
	if merged.Closed(set.Grace, pt.streamTime) {
		return false, nil
	}
	accs, err := accumulators(set, ent, -1)
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
		old, err := accumulators(set, ent, si)
		if err != nil {
			return false, err
		}
		for k := range accs {
			if err := accs[k].Merge(old[k]); err != nil {
				return false, fmt.Errorf("merge %q: %w", set.Aggs[k].Name, err)
			}
		}
		nw.Revision += ent.Windows[si].Revision
		nw.LastEmit = max(nw.LastEmit, ent.Windows[si].LastEmit)
		remove[si] = true
	}
	kept := ent.Windows[:0]
	for i, w := range ent.Windows {
		if !remove[i] {
			kept = append(kept, w)
		}
	}
	ent.Windows = append(kept, nw)
	w := &ent.Windows[len(ent.Windows)-1]
	storeAccs(w, accs)
	pt.e.emitUpdate(ctx, ctx.Key(), set, w, accs, now)
	return true, nil
}

// accumulators decodes window i's accumulators, or returns fresh ones when i < 0.
func accumulators(set *plan.Set, ent *state.Entity, i int) ([]plan.Accumulator, error) {
	accs := make([]plan.Accumulator, len(set.Aggs))
	for k, ad := range set.Aggs {
		if i < 0 {
			accs[k] = ad.New()
			continue
		}
		w := ent.Windows[i]
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

// storeAccs encodes accs into window w.
func storeAccs(w *state.Window, accs []plan.Accumulator) {
	aggs := make([][]byte, len(accs))
	for k, a := range accs {
		aggs[k] = a.AppendBinary(nil)
	}
	w.Aggs = aggs
}

// reemitUpdates re-sends the current totals of the open windows that a replayed event belongs to,
// for sets that emit every update.
func (pt *partition) reemitUpdates(ctx goka.Context, ent *state.Entity, src *plan.Source, t int64) {
	for _, si := range src.Sets {
		set := pt.e.plan.Sets[si]
		if set.Emit != plan.EmitEveryUpdate {
			continue
		}
		for i := range ent.Windows {
			w := &ent.Windows[i]
			if w.Set != si || !w.Span().Contains(t) || pt.closesAt(w) <= pt.streamTime {
				continue
			}
			accs, err := accumulators(set, ent, i)
			if err != nil {
				pt.e.fail(ctx, fmt.Errorf("entity %q set %q: %w", ctx.Key(), set.Name, err))
				return
			}
			pt.e.emit(ctx, ctx.Key(), set, w, accs, false)
		}
	}
}
