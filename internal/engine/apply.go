package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// update is a running total to emit once the event's state is written, or, deferred, one an
// EarlyEvery set holds back until its interval has passed (due: wall-clock ms).
type update struct {
	set      *plan.Set
	window   state.Window
	values   []totals.Value
	deferred bool
	due      int64
}

// apply applies one source event to its entity, exactly once. User code (accumulators) runs
// first, on the entity read from the table; only when all of it has run are the partition's
// watermarks moved, the state written and the totals emitted, so a panic or an error of user code
// leaves nothing half done.
func (pt *partition) apply(ctx goka.Context, src *plan.Source, from originKey, at recordAt, recordTime time.Time, raw []byte, ev plan.Event) {
	e := pt.e
	now := e.cfg.Now()
	t := src.EventTime(ev)
	if e.plan.Future(t, recordTime) {
		e.deadLetter(ctx, raw, deadletter.Future,
			fmt.Sprintf("event time %s is more than %v ahead of its record's timestamp %s", time.UnixMilli(t).UTC().Format(time.RFC3339Nano),
				e.plan.MaxFutureSkew, recordTime.UTC().Format(time.RFC3339Nano)), at)
		return
	}
	if len(src.Joins) > 0 {
		var err error
		if ev, err = e.join(ctx, src, ev, t, recordTime); err != nil {
			e.deadLetter(ctx, raw, deadletter.Unjoined, err.Error(), at)
			return
		}
	}
	ent, err := pt.load(ctx)
	if err != nil {
		e.fail(ctx, err)
		return
	}
	isNew := ent == nil
	if isNew {
		ent = &state.Entity{}
	}
	og := pt.originOf(from)
	// Lateness follows the event's own origin (package comment); the partition's stream time is
	// below it unless the origin joined late, and then what closed stays closed.
	judge := max(og.wm, pt.st)
	typ := src.Type(ev)
	if ent.Applied(from.topic, from.partition, at.Offset) {
		pt.replay(ctx, ent, sourceEvent{src: src, from: from, at: at, raw: raw, ev: ev, t: t, typ: typ}, now)
		return
	}
	before := len(ent.Windows)
	ups, contribs, late, applied, err := pt.addToSets(ctx.Key(), ent, src, ev, typ, t, judge, now)
	var bad *rollupKeyError
	if errors.As(err, &bad) {
		e.deadLetterFenced(ctx, raw, bad.reason, bad.Error(), at)
		return
	}
	if err != nil {
		// User code (an aggregation's Decode) refused a window's state: the event cannot be
		// applied, and nothing of it is (ent is the callback's own copy).
		e.m.panics.WithLabelValues("record").Inc()
		e.deadLetterFenced(ctx, raw, deadletter.UserError, err.Error(), at)
		return
	}
	if applied {
		// Checked before anything is sent: an entity the changelog would refuse stops the
		// processor, and its event would be lost with every later one.
		if n := pt.stateSize(ent); n > e.plan.MaxMessageBytes {
			e.deadLetterFenced(ctx, raw, deadletter.TooLarge, fmt.Sprintf("applying the event would make the state of entity %q %d bytes, more than the limit of %d (MaxMessageBytes: a changelog message)",
				ctx.Key(), n, e.plan.MaxMessageBytes), at)
			return
		}
	}
	// Everything user code does is done: from here on, commit. When the event was applied too,
	// the state write below fences it, so its late records must be in Kafka first
	// (DurableSender).
	for _, set := range late {
		if err := e.late(ctx, raw, set, at, applied); err != nil {
			e.fail(ctx, fmt.Errorf("entity %q offset %d: %w", ctx.Key(), at.Offset, err))
			return
		}
	}
	if !applied {
		// Late for every window, or of a type no set takes: the state is unchanged and the
		// origin's watermark does not move, so the write is saved. A replay judges it the same,
		// unless a later event's write fences it first: that write lists it as pending (set), so
		// that a replay sends its late records again if Kafka lost them.
		if len(late) > 0 && e.plan.LateTopic != "" {
			pt.lates[ctx.Key()] = append(pt.lates[ctx.Key()], state.Pending{Topic: from.topic, Partition: from.partition, Offset: at.Offset})
		}
		return
	}
	pt.advanceOrigin(og, t, now)
	pt.windowsDelta(len(ent.Windows)-before, len(ent.Windows)-before)
	pt.prune(ctx.Key(), ent)
	ent.Advance(from.topic, from.partition, at.Offset, og.wm)
	ent.Fences = pt.spentFences(ent.Fences, from)
	ent.StreamTime = pt.closeST()
	pt.set(ctx, ent)
	if isNew {
		pt.entities.Inc()
	}
	for i := range ups {
		if ups[i].deferred {
			pt.earlyAt(ctx.Key(), ups[i].due)
			continue
		}
		e.emit(ctx, ctx.Key(), ups[i].set, &ups[i].window, ups[i].values, false)
	}
	for _, c := range contribs {
		pt.contribute(ctx, ctx.Key(), c, ev, t, now)
	}
	pt.schedule(ctx.Key(), ent)
	if st := pt.closeST(); st != minTime {
		pt.lag.Set(float64(now.UnixMilli()-st) / 1000)
	}
	pt.closeDue(ctx)
}

// join enriches ev, of event time t in a record stamped recordTime, from the tables src joins, in
// order (plan.Join): the sets see what the joins return. An error is a join refusing the event,
// named with its table.
func (e *Engine) join(ctx goka.Context, src *plan.Source, ev plan.Event, t int64, recordTime time.Time) (plan.Event, error) {
	tp := e.tables.Load()
	if tp == nil {
		e.fail(ctx, fmt.Errorf("source %s joins tables, and the engine was given none", src.Topic))
	}
	tables := *tp
	for _, j := range src.Joins {
		tables.Wait(ctx.Context(), j.Table, t, recordTime)
		v, found := tables.At(j.Table, j.Key(ev), t)
		out, err := j.Apply(ev, v, found)
		if err != nil {
			return nil, fmt.Errorf("join with table %q: %w", e.plan.Tables[j.Table].Name, err)
		}
		ev = out
	}
	return ev, nil
}

// addToSets adds key's event of type typ at event time t to each of src's sets that takes it: the
// windows it updated (ups), the rollup windows it contributes to, the sets it is late for, and
// whether any window took it. An error is user code refusing a window's state, named with its set
// and entity, or a rollupKeyError; ent is then half updated and must not be written.
func (pt *partition) addToSets(key string, ent *state.Entity, src *plan.Source, ev plan.Event, typ string, t, judge int64, now time.Time) (ups []update, contribs []contribution, late []*plan.Set, applied bool, err error) {
	// took says which sets applied the event, for the coarser sets after them: a coarser set
	// takes what its finer set took, and is late where it was late.
	var tookBuf [4]uint64
	took, lateFor := tookBuf[:2], tookBuf[2:]
	if n := (len(pt.e.plan.Sets) + 63) / 64; n > 1 {
		took, lateFor = make([]uint64, n), make([]uint64, n)
	}
	for _, si := range src.Sets {
		set := pt.e.plan.Sets[si]
		if f := set.Finer; f != nil {
			switch {
			case lateFor[f.Index/64]&(1<<(f.Index%64)) != 0:
				late = append(late, set)
				lateFor[si/64] |= 1 << (si % 64)
				continue
			case took[f.Index/64]&(1<<(f.Index%64)) == 0:
				continue
			}
		} else if !set.Takes(ev, typ) {
			continue
		}
		var ok, isLate bool
		switch {
		case set.Window.Kind() == windows.KindSession:
			ok, isLate, err = pt.addSession(ent, set, ev, t, judge, now, &ups)
		case set.Rollup != nil:
			rk := set.Rollup.KeyOf(ev)
			if rk == "" {
				continue // the user's key function leaves the event out of this set
			}
			if err := pt.checkRollupKey(set, rk); err != nil {
				return nil, nil, nil, false, err
			}
			ok, isLate, err = pt.addFixed(ent, set, rk, ev, t, judge, now, &ups, &contribs)
		default:
			ok, isLate, err = pt.addFixed(ent, set, "", ev, t, judge, now, &ups, nil)
		}
		if err != nil {
			return nil, nil, nil, false, fmt.Errorf("set %s, entity %q: %w", set.Name, key, err)
		}
		applied = applied || ok
		if ok {
			took[si/64] |= 1 << (si % 64)
		}
		if isLate {
			late = append(late, set)
			lateFor[si/64] |= 1 << (si % 64)
		}
	}
	return ups, contribs, late, applied, nil
}

// rollupKeyError is a rollup key that cannot be one: the event goes to the dead-letter topic.
type rollupKeyError struct {
	reason deadletter.Reason
	detail string
}

func (r *rollupKeyError) Error() string { return r.detail }

// checkRollupKey refuses a rollup key longer than the entity limit (it is an HBase row's key as
// an entity is), or one that holds a '/' of the owner's state key where it cannot be read back.
func (pt *partition) checkRollupKey(set *plan.Set, key string) error {
	if n := len(key); n > pt.e.plan.MaxEntityBytes {
		return &rollupKeyError{deadletter.TooLarge, fmt.Sprintf("rollup key of set %s is %d bytes, more than the limit of %d", set.Name, n, pt.e.plan.MaxEntityBytes)}
	}
	return nil
}

// advanceOrigin moves an origin's watermark to an applied event's time t when it is newer, and the
// partition's event stream time with it when that origin held it back.
func (pt *partition) advanceOrigin(og *origin, t int64, now time.Time) {
	if t <= og.wm {
		return
	}
	wasMin := og.wm <= pt.eventST
	og.wm, og.lastAdvance = t, now
	pt.metaDirty = true
	if wasMin {
		pt.recomputeEventST()
	}
}

// sourceEvent is one decoded source record as replay sees it: its source, its origin (the
// source partition, or the sender of a repartitioned record), where it is in Kafka, its bytes,
// and the event with its time and type.
type sourceEvent struct {
	src  *plan.Source
	from originKey
	at   recordAt
	raw  []byte
	ev   plan.Event
	t    int64
	typ  string
}

// replay handles an event the entity's fences say it applied already: the local table has it,
// but what was sent to Kafka when it was applied (the changelog write, totals, late records) may
// have died with the process, and its offset is about to be committed. The state is written
// again, so the changelog holds it before the commit, the current totals are re-sent (absolute,
// so resending is safe), and, for an event that was late for every window and is pending, its
// late records too.
func (pt *partition) replay(ctx goka.Context, ent *state.Entity, se sourceEvent, now time.Time) {
	e := pt.e
	pt.duplicates.Inc()
	// A replay is the partition catching up, not a quiet input: it keeps the origin from being
	// called idle (closing windows in the middle of a replay would change what it applies).
	pt.originOf(se.from).lastAdvance = now
	if ent.IsPending(se.from.topic, se.from.partition, se.at.Offset) {
		// It was late for every set that takes its type (it applied to none), and stays so: what
		// judged it then only moved on since.
		for _, si := range se.src.Sets {
			if set := e.plan.Sets[si]; set.Takes(se.ev, se.typ) {
				if err := e.late(ctx, se.raw, set, se.at, false); err != nil {
					e.fail(ctx, fmt.Errorf("entity %q offset %d: %w", ctx.Key(), se.at.Offset, err))
					return
				}
			}
		}
	}
	ups := pt.currentUpdates(ctx.Key(), ent, se.src, se.t)
	pt.set(ctx, ent)
	for _, u := range ups {
		e.emit(ctx, ctx.Key(), u.set, &u.window, u.values, false)
	}
}

// stateSize is at least the size of ent's encoding (state.Entity.Append), cheaply; it encodes
// ent to tell exactly only when the bound is large.
func (pt *partition) stateSize(ent *state.Entity) int {
	n := 64 + 30*len(ent.Fences) + 20*len(ent.Pending)
	for i := range ent.Windows {
		n += 60 + len(ent.Windows[i].Key)
		for _, a := range ent.Windows[i].Aggs {
			n += 10 + len(a)
		}
	}
	if n <= pt.e.plan.MaxMessageBytes/2 {
		return n
	}
	desc := ent.LayoutDesc
	if !pt.layoutHeld {
		ent.LayoutDesc = &pt.e.layout // what describe may add
	}
	n = len(ent.Append(nil)) + pt.e.plan.MaxEntityBytes
	ent.LayoutDesc = desc
	return n
}

// addFixed applies ev to its tumbling or hopping windows that are still open by judge, and
// reports whether it applied to any and whether it was late for any (a hopping event may be late
// for some of its windows and on time for others). For a rollup set, key is the event's rollup
// key: the windows are the entity's contributions to it, listed in contribs, and emit nothing
// of their own.
func (pt *partition) addFixed(ent *state.Entity, set *plan.Set, key string, ev plan.Event, t, judge int64, now time.Time, ups *[]update, contribs *[]contribution) (applied, late bool, err error) {
	var buf [8]windows.Window
	for _, w := range set.Window.Assign(t, buf[:0]) {
		if pt.closed(set, w, judge) {
			late = true
			continue
		}
		i := ent.FindKey(set.Index, w.Start, key)
		accs, err := accumulators(set, ent, i)
		if err != nil {
			return false, false, err
		}
		created := i < 0
		if created {
			nw := state.Window{Set: set.Index, Start: w.Start, End: w.End, Key: key}
			if pt.beforeLive(set, w) {
				nw.Absent = allAbsent(set)
			}
			ent.Windows = append(ent.Windows, nw)
			i = len(ent.Windows) - 1
		}
		for _, a := range accs {
			a.Add(ev, t)
		}
		storeAccs(&ent.Windows[i], accs)
		ent.Windows[i].Revision++
		if contribs != nil {
			*contribs = append(*contribs, contribution{set: set, key: key, w: w, created: created})
		} else {
			addUpdate(set, &ent.Windows[i], accs, now, ups)
		}
		applied = true
	}
	return applied, late, nil
}

// addSession merges ev's session [t, t+gap) with the entity's overlapping sessions of the set that
// are still open by judge: the old sessions are merged first, in order, then the event is added,
// so that among events at one time the last applied wins, as in every other window kind.
func (pt *partition) addSession(ent *state.Entity, set *plan.Set, ev plan.Event, t, judge int64, now time.Time, ups *[]update) (applied, late bool, err error) {
	var idx []int
	var open []windows.Window
	for i := range ent.Windows {
		w := &ent.Windows[i]
		if w.Set == set.Index && !pt.closed(set, w.Span(), judge) {
			idx = append(idx, i)
			open = append(open, w.Span())
		}
	}
	merged, absorbed := windows.MergeSession(open, set.Window.Assign(t, nil)[0])
	if pt.closed(set, merged, judge) {
		return false, true, nil
	}
	nw := state.Window{Set: set.Index, Start: merged.Start, End: merged.End, Revision: 1}
	if pt.beforeLive(set, merged) {
		nw.Absent = allAbsent(set)
	}
	var accs []plan.Accumulator
	remove := map[int]bool{}
	for n, ai := range absorbed {
		si := idx[ai]
		old, err := accumulators(set, ent, si)
		if err != nil {
			return false, false, err
		}
		if n == 0 {
			accs = old
		} else {
			for k := range accs {
				if err := accs[k].Merge(old[k]); err != nil {
					return false, false, fmt.Errorf("merge %q: %w", set.Aggs[k].Name, err)
				}
			}
		}
		nw.Revision += ent.Windows[si].Revision
		nw.LastEmit = max(nw.LastEmit, ent.Windows[si].LastEmit)
		nw.Absent = plan.UnionAbsent(nw.Absent, ent.Windows[si].Absent)
		remove[si] = true
	}
	if accs == nil {
		if accs, err = accumulators(set, ent, -1); err != nil {
			return false, false, err
		}
	}
	for _, a := range accs {
		a.Add(ev, t)
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
	addUpdate(set, w, accs, now, ups)
	return true, false, nil
}

// accumulators decodes window i's accumulators, or returns fresh ones when i < 0. An aggregation
// with no stored accumulator (added to the set since the window opened) starts fresh.
func accumulators(set *plan.Set, ent *state.Entity, i int) ([]plan.Accumulator, error) {
	if i < 0 {
		return set.DecodeAccs(nil)
	}
	accs, err := set.WindowAccs(&ent.Windows[i])
	if err != nil {
		return nil, fmt.Errorf("window %d, %w", ent.Windows[i].Start, err)
	}
	return accs, nil
}

// storeAccs encodes accs into window w, all in one buffer: one allocation per window written,
// not one per aggregation.
func storeAccs(w *state.Window, accs []plan.Accumulator) {
	aggs := make([][]byte, len(accs))
	buf := make([]byte, 0, 16*len(accs))
	for k, a := range accs {
		n := len(buf)
		buf = a.AppendBinary(buf)
		aggs[k] = buf[n:len(buf):len(buf)]
	}
	w.Aggs = aggs
}

// addUpdate queues a window's running total if the set's emission policy wants one now.
func addUpdate(set *plan.Set, w *state.Window, accs []plan.Accumulator, now time.Time, ups *[]update) {
	switch set.Emit {
	case plan.EmitEveryUpdate:
	case plan.EmitEarly:
		if w.LastEmit != 0 && now.Sub(time.UnixMilli(w.LastEmit)) < set.EmitEvery {
			// Fired by the tick once due, whether or not another event comes (fireEarly).
			*ups = append(*ups, update{set: set, deferred: true, due: w.LastEmit + set.EmitEvery.Milliseconds()})
			return
		}
		w.LastEmit = now.UnixMilli()
	default:
		return
	}
	if len(w.Absent) == len(set.Aggs) {
		return // no value: a window that started before the set ran
	}
	*ups = append(*ups, update{set: set, window: *w, values: set.Values(accs, w.Absent)})
}

// currentUpdates are the current totals of the open windows a replayed event belongs to, for
// sets that emit every update. A window whose state user code cannot read is left out (its
// events were dead-lettered when they came).
func (pt *partition) currentUpdates(entity string, ent *state.Entity, src *plan.Source, t int64) []update {
	var ups []update
	for _, si := range src.Sets {
		set := pt.e.plan.Sets[si]
		if set.Emit != plan.EmitEveryUpdate {
			continue
		}
		for i := range ent.Windows {
			w := &ent.Windows[i]
			if w.Set != si || !w.Span().Contains(t) || pt.windowClosesAt(w) <= pt.closeST() {
				continue
			}
			values, err := pt.e.values(set, ent, i)
			if err != nil {
				pt.e.log.Error("current total of a window cannot be computed for a replay", "set", set.Name, "entity", entity, "window_start", w.Start, "err", err)
				continue
			}
			if len(values) == 0 {
				continue // every aggregation absent
			}
			ups = append(ups, update{set: set, window: *w, values: values})
		}
	}
	return ups
}

// spentFences drops the fences no replay can need any more. A fence's events all have times up to
// its watermark (an event later than its origin's watermark is never applied); once what judges a
// replay from that origin (its watermark, or the partition's stream time) is past the last window
// such a time can fall in, a replayed one is late for every window and cannot count twice. So an entity that
// gets re-keyed events from many source partitions keeps fences only for those of its open windows.
// With session windows (which a replayed event could merge into whatever time back) every fence
// stays. The fence of the event being applied always stays.
func (pt *partition) spentFences(fs []state.Fence, current originKey) []state.Fence {
	if pt.e.span < 0 || len(fs) < 2 {
		return fs
	}
	kept := fs[:0]
	for _, f := range fs {
		// A replayed event from k is judged by k's watermark or the partition's stream time,
		// whichever is later: as the acknowledged record holds them, they survive a restart.
		k := originKey{f.Topic, f.Partition}
		if k == current || f.Watermark+pt.e.span >= max(pt.metaWM[k], pt.metaST) {
			kept = append(kept, f)
		}
	}
	return kept
}
