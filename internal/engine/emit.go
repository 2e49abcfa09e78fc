package engine

import (
	"fmt"
	"math"
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

// emit writes one window total to the totals topic, keyed by entity.
func (e *Engine) emit(ctx goka.Context, entity string, set *plan.Set, w *state.Window, values []totals.Value, final bool) {
	r := totals.Record{Topology: e.plan.Name, Set: set.Name, Entity: entity, Start: w.Start, End: w.End,
		Final: final, Revision: w.Revision, Values: values}
	e.cfg.Output(ctx, e.plan.TotalsTopic, entity, r.Encode(), nil)
	e.m.emitted.WithLabelValues(set.Name, strconv.FormatBool(final)).Inc()
}

// values computes window i's totals. It runs user code (an aggregation's Decode and Value) out of
// any record's callback, so a panic there is returned as an error instead.
func (e *Engine) values(set *plan.Set, ent *state.Entity, i int) (vs []totals.Value, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	accs, err := accumulators(set, ent, i)
	if err != nil {
		return nil, err
	}
	return set.Values(accs, ent.Windows[i].Absent), nil
}

// late counts an event that came after its windows of set closed, and routes it to the late topic
// if the topology has one.
// With durable set, the record is in Kafka when late returns (DurableSender), or late fails.
func (e *Engine) late(ctx goka.Context, raw []byte, set *plan.Set, src recordAt, durable bool) error {
	if e.plan.LateTopic == "" {
		e.m.lateDropped.WithLabelValues(set.Name).Inc()
		return nil
	}
	r := deadletter.Record{Source: src.Source, Timestamp: src.Time, Reason: deadletter.Late,
		Detail: "the event came after its window of " + set.Name + " closed", Set: set.Name, Value: raw}
	written, err := e.aside(ctx, e.plan.LateTopic, r, durable)
	if err != nil {
		return fmt.Errorf("late record of set %s: %w", set.Name, err)
	}
	if written {
		e.m.lateRouted.WithLabelValues(set.Name).Inc()
	}
	return nil
}

// aside writes a dead-letter or late record to topic, unless a run before this one wrote it
// already for the record processed again (Config.Written), and reports whether it wrote it.
// With durable and a DurableSender, the record is in Kafka when aside returns, or aside fails.
// A record that stands for the callback's own record gets that record's key, timestamp and headers
// as the original's (not one re-keyed through the loop topic, whose original key and headers
// stayed at the source).
func (e *Engine) aside(ctx goka.Context, topic string, r deadletter.Record, durable bool) (bool, error) {
	if string(ctx.Topic()) == r.Source.Topic && ctx.Partition() == r.Source.Partition && ctx.Offset() == r.Source.Offset {
		r.Key = []byte(ctx.Key())
		r.Timestamp = ctx.Timestamp()
		for k, v := range ctx.Headers() {
			r.Headers = append(r.Headers, deadletter.Header{Key: k, Value: v})
		}
		slices.SortFunc(r.Headers, func(a, b deadletter.Header) int { return strings.Compare(a.Key, b.Key) })
	}
	if e.cfg.Group != "" {
		r.Group = e.cfg.Group
		r.By = deadletter.Source{Topic: string(ctx.Topic()), Partition: ctx.Partition(), Offset: ctx.Offset()}
	}
	if e.cfg.Written != nil && e.cfg.Written(r.Identity(topic)) {
		e.m.asideWritten.WithLabelValues(topic).Inc()
		return false, nil
	}
	r.Fit(e.plan.MaxMessageBytes)
	key, value, headers := string(r.RecordKey()), r.Value, headerMap(r.RecordHeaders())
	if ds, ok := e.cfg.Durability.(DurableSender); ok && durable {
		if err := ds.SendDurable(topic, key, value, headers); err != nil {
			return false, err
		}
		return true, nil
	}
	e.cfg.Output(ctx, topic, key, value, headers)
	return true, nil
}

// deadLetterFinal sets aside the final total of a window that user code (an aggregation's Decode
// or Value) cannot compute. It stands for the totals record that could not be made: its source
// names the totals topic, set and entity, the processor's partition and, as offset, the window's
// end, so that a repeat after a restart is the same record.
func (e *Engine) deadLetterFinal(ctx goka.Context, partition int32, entity string, set *plan.Set, w *state.Window, err error) {
	e.deadLetterWindow(ctx, partition, entity, set, w, deadletter.UserError, fmt.Sprintf("cannot be computed: %v", err))
}

// deadLetterWindow sets aside the final total of a window that cannot be made, for reason (see
// deadLetterFinal); why completes "the final total of window ... ".
func (e *Engine) deadLetterWindow(ctx goka.Context, partition int32, entity string, set *plan.Set, w *state.Window, reason deadletter.Reason, why string) {
	src := deadletter.Source{Topic: e.plan.TotalsTopic + "/" + set.Name + "/" + entity, Partition: partition, Offset: w.End}
	r := deadletter.Record{Source: src, Reason: reason, Set: set.Name, Key: []byte(entity), Timestamp: time.UnixMilli(w.End),
		Detail: fmt.Sprintf("the final total of window [%d, %d) of set %s, entity %q, %s", w.Start, w.End, set.Name, entity, why)}
	if written, _ := e.aside(ctx, e.plan.DeadLetter, r, false); written {
		e.m.deadLettered.WithLabelValues(string(r.Reason)).Inc()
	}
}

// deadLetter sends a record the engine cannot process to the dead-letter topic with its reason.
func (e *Engine) deadLetter(ctx goka.Context, raw []byte, reason deadletter.Reason, detail string, src recordAt) {
	r := deadletter.Record{Source: src.Source, Timestamp: src.Time, Reason: reason, Detail: detail, Value: raw}
	if written, _ := e.aside(ctx, e.plan.DeadLetter, r, false); written {
		e.m.deadLettered.WithLabelValues(string(reason)).Inc()
	}
}

// deadLetterFenced dead-letters a record that its entity's next write will fence: a replay skips
// such a record as applied and would never set it aside again, so the dead letter must be in
// Kafka before that write (DurableSender, as late records of applied events; these are rare: an
// aggregation's error or panic, a state grown too large). Without a DurableSender it goes out
// with the others.
func (e *Engine) deadLetterFenced(ctx goka.Context, raw []byte, reason deadletter.Reason, detail string, src recordAt) {
	r := deadletter.Record{Source: src.Source, Timestamp: src.Time, Reason: reason, Detail: detail, Value: raw}
	written, err := e.aside(ctx, e.plan.DeadLetter, r, true)
	if err != nil {
		e.fail(ctx, fmt.Errorf("dead letter of %s: %w", src, err))
		return
	}
	if written {
		e.m.deadLettered.WithLabelValues(string(reason)).Inc()
	}
}

// headerMap is headers as goka takes them.
func headerMap(headers []deadletter.Header) goka.Headers {
	hs := make(goka.Headers, len(headers))
	for _, h := range headers {
		hs[h.Key] = h.Value
	}
	return hs
}

// recordAt is a source record a set-aside record stands for: its position, and its timestamp,
// which the set-aside record is produced with, so that a repeat after a crash is the same in
// every field (a re-keyed event's comes with it through the loop topic).
type recordAt struct {
	deadletter.Source
	Time time.Time
}

// sourceOf is the callback's record.
func sourceOf(ctx goka.Context) recordAt {
	return recordAt{deadletter.Source{Topic: string(ctx.Topic()), Partition: ctx.Partition(), Offset: ctx.Offset()}, ctx.Timestamp()}
}

// emission is one close of an entity: windows closing at or before upTo were emitted at wall time
// at, and Kafka holds them once Acknowledged reaches bound.
type emission struct {
	upTo  int64
	bound uint64
	at    time.Time
}

type retainedEntry struct {
	at     time.Time
	entity string
}

// emittedUpTo is the stream time up to which this process emitted the entity's closed windows.
func (pt *partition) emittedUpTo(entity string) int64 {
	up := int64(math.MinInt64)
	for _, em := range pt.emitted[entity] {
		up = max(up, em.upTo)
	}
	return up
}

// schedule records when the entity's next window still to emit closes.
func (pt *partition) schedule(entity string, ent *state.Entity) {
	if isOwnerKey(entity) {
		pt.scheduleOwner(entity, ent)
		return
	}
	up := pt.emittedUpTo(entity)
	at, last, found := int64(0), int64(0), false
	for i := range ent.Windows {
		if c := pt.windowClosesAt(&ent.Windows[i]); c > up {
			if !found {
				at, last, found = c, c, true
			}
			at, last = min(at, c), max(last, c)
		}
	}
	if found {
		pt.due.set(entity, at, last)
	} else {
		pt.due.remove(entity)
	}
	pt.scheduled.Set(float64(pt.due.Len()))
}

// scheduleOwner records when a rollup owner's next merged window still to emit closes.
func (pt *partition) scheduleOwner(entity string, ent *state.Entity) {
	up := pt.emittedUpTo(entity)
	at, found := int64(0), false
	for i := range ent.Windows {
		w := &ent.Windows[i]
		if w.Key != "" {
			continue
		}
		if c := ownerClosesAt(pt.e.plan.Sets[w.Set], w); c > up && (!found || c < at) {
			at, found = c, true
		}
	}
	set := pt.ownerSetOf(ent)
	for s, h := range pt.ru.dues {
		if found && set != nil && set.Index == s {
			h.set(entity, at, at)
		} else {
			h.remove(entity)
		}
	}
}

// closeDue emits the final totals of every window that stream time has closed and whose entity
// Kafka holds as the local table does, and those of rollup owners' windows that every source
// partition's progress has closed. It reads the entities' state from the local table and emits
// from whatever callback advanced stream time: no message per entity, no write.
func (pt *partition) closeDue(ctx goka.Context) {
	pt.closeHeapDue(ctx, &pt.due, pt.closeST())
	if pt.e.rollups {
		for s, h := range pt.ru.dues {
			pt.closeHeapDue(ctx, h, ownerST(pt.e.plan.Sets[s], pt.ru.done[s]))
		}
	}
	pt.scheduled.Set(float64(pt.due.Len()))
}

// closeHeapDue emits the entities of h due at st.
func (pt *partition) closeHeapDue(ctx goka.Context, h *closeHeap, st int64) {
	for h.Len() > 0 && h.minAt() <= st {
		entity := h.minEntity()
		if !pt.closable(entity) {
			h.remove(entity)
			pt.waiting = append(pt.waiting, entity)
			pt.countWaits()
			pt.nudge(ctx)
			continue
		}
		ent, err := pt.read(entity)
		if err != nil {
			pt.e.fail(ctx, fmt.Errorf("partition %d: state of %q: %w", pt.id, entity, err))
			return
		}
		if ent == nil {
			h.remove(entity)
			continue
		}
		pt.emitClosed(ctx, entity, ent)
		pt.schedule(entity, ent) // moves its entry in place, or removes it
	}
}

// emitClosed emits the final totals of the entity's windows closed at the partition's stream time
// and not emitted yet by this process.
func (pt *partition) emitClosed(ctx goka.Context, entity string, ent *state.Entity) {
	e := pt.e
	st := pt.closeST()
	owner := isOwnerKey(entity)
	if owner {
		st = minTime
		if set := pt.ownerSetOf(ent); set != nil {
			st = ownerST(set, pt.ru.done[set.Index])
		}
	}
	up := pt.emittedUpTo(entity)
	n := 0
	for i := range ent.Windows {
		w := &ent.Windows[i]
		set := e.plan.Sets[w.Set]
		if owner {
			if c := ownerClosesAt(set, w); w.Key == "" && c > up && c <= st {
				pt.emitMerged(ctx, entity, set, ent, i)
				n++
			}
			continue
		}
		if c := pt.windowClosesAt(w); c <= up || c > st {
			continue
		}
		if set.Rollup != nil {
			pt.mergeContribution(ctx, entity, ent, i)
			n++
			continue
		}
		values, err := e.values(set, ent, i)
		if err != nil {
			// User code (an aggregation's Decode or Value) failed on this window's state: its final
			// total cannot be made. It is dead-lettered, and processing goes on; the window leaves
			// with the entity's others.
			e.m.panics.WithLabelValues("close").Inc()
			e.log.Error("final total of a window cannot be computed: dead-lettered", "set", set.Name, "entity", entity, "window_start", w.Start, "err", err)
			e.deadLetterFinal(ctx, pt.id, entity, set, w, err)
			n++
			continue
		}
		if len(values) == 0 && len(set.Aggs) > 0 {
			e.m.beforeLive.WithLabelValues(set.Name).Inc() // every aggregation absent: no total
		} else {
			e.emit(ctx, entity, set, w, values, true)
		}
		n++
	}
	if n > 0 {
		now := e.cfg.Now()
		pt.emitted[entity] = append(pt.emitted[entity], emission{upTo: st, bound: e.cfg.Durability.Sent(), at: now})
		if !pt.queued[entity] {
			pt.queued[entity] = true
			pt.prunes = append(pt.prunes, retainedEntry{at: now.Add(e.cfg.FinalRetention), entity: entity})
		}
		pt.windowsDelta(-n, 0)
	}
}

// prune drops from ent the closed windows whose final totals Kafka acknowledged, and reports
// whether it dropped any.
func (pt *partition) prune(entity string, ent *state.Entity) bool {
	ems := pt.emitted[entity]
	if len(ems) == 0 && !pt.e.rollups {
		return false
	}
	owner := isOwnerKey(entity)
	ownerMeta := int64(minTime)
	if set := pt.ownerSetOf(ent); owner && set != nil {
		ownerMeta = ownerST(set, pt.ru.metaDone[set.Index])
	}
	up := int64(math.MinInt64)
	keep := ems[:0]
	for _, em := range ems {
		// An owner's window leaves only once its record holds the progress that completed it
		// too: a partial sent again after a restart must find the window final, not open it anew.
		if em.bound <= pt.acked && (!owner || em.upTo <= ownerMeta) {
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
	kept := ent.Windows[:0]
	for _, w := range ent.Windows {
		set := pt.e.plan.Sets[w.Set]
		switch {
		case owner:
			if ownerClosesAt(set, &w) > up {
				kept = append(kept, w)
			}
		case set.Rollup != nil:
			if !pt.contributionDone(&w) {
				kept = append(kept, w)
			}
		case pt.windowClosesAt(&w) > up:
			kept = append(kept, w)
		}
	}
	pruned := len(ent.Windows) - len(kept)
	ent.Windows = kept
	pt.windowsDelta(0, -pruned)
	if !owner && up != math.MinInt64 {
		for i := range kept {
			if pt.windowClosesAt(&kept[i]) <= up {
				// A contribution emitted (merged into its partial) stays until the partial is
				// done: remember that it was, or the schedule would close it again.
				pt.emitted[entity] = append(pt.emitted[entity], emission{upTo: up})
				break
			}
		}
	}
	return pruned > 0
}

// earlyAt records that entity holds back an early total due at wall-clock ms due.
func (pt *partition) earlyAt(entity string, due int64) {
	if at, ok := pt.early[entity]; !ok || due < at {
		pt.early[entity] = due
	}
}

// visitDueEarly sends a close message, the entity's maintenance visit, to each entity whose held
// back early total is due: on a quiet entity it would otherwise wait for the next event, and the
// totals topic (and the table) would lag what the processor's open window (live view) shows.
func (pt *partition) visitDueEarly(ctx goka.Context, now time.Time) {
	for entity, due := range pt.early {
		if due <= now.UnixMilli() {
			delete(pt.early, entity)
			ctx.Loopback(entity, (&loopMsg{kind: loopClose}).encode())
		}
	}
}

// fireEarly emits the running totals of ent's open windows of EarlyEvery entity sets whose
// interval has passed since their last firing, and reports whether it fired any (the state then
// records when). A window stream time has closed is left to its final: its early total would
// come after it.
func (pt *partition) fireEarly(ctx goka.Context, entity string, ent *state.Entity, now time.Time) bool {
	if isOwnerKey(entity) {
		return false
	}
	st, fired := pt.closeST(), false
	for i := range ent.Windows {
		w := &ent.Windows[i]
		set := pt.e.plan.Sets[w.Set]
		if set.Emit != plan.EmitEarly || set.Rollup != nil || w.Key != "" || pt.windowClosesAt(w) <= st ||
			len(w.Absent) == len(set.Aggs) || (w.LastEmit != 0 && now.Sub(time.UnixMilli(w.LastEmit)) < set.EmitEvery) {
			continue
		}
		values, err := pt.e.values(set, ent, i)
		if err != nil {
			continue // user code refused the state: the final's path reports it
		}
		w.LastEmit = now.UnixMilli()
		pt.e.emit(ctx, entity, set, w, values, false)
		fired = true
	}
	return fired
}
