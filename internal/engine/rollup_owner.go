package engine

import (
	"fmt"
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

// onProgress takes a source partition's progress in: its stream time t, and the ends up to which
// it has sent every window's final partial, per set by name. A progress of an earlier version
// carries no ends: the windows it has sent are taken to be those its stream time closes by this
// topology's graces, as that version did. It emits the merged windows it completes.
func (pt *partition) onProgress(ctx goka.Context, m *loopMsg) {
	from := m.partition
	if from < 0 || int(from) >= len(pt.ru.progress) {
		pt.e.fail(ctx, fmt.Errorf("progress from partition %d of %d: the partition count changed under a topology with rollups", from, len(pt.ru.progress)))
		return
	}
	pt.ru.progress[from] = max(pt.ru.progress[from], m.offset)
	ends := m.ends
	if !m.byEnd {
		for _, set := range pt.e.plan.Sets {
			if set.Rollup != nil {
				ends = append(ends, setEnd{set: set.Name, end: m.offset - set.Grace})
			}
		}
	}
	moved := false
	for _, se := range ends {
		set := pt.e.plan.SetByName(se.set)
		if set == nil || set.Rollup == nil {
			// A set this version has not (as a rollup): nothing of it waits here, but what its
			// senders say is kept for the version that has it.
			if pt.ru.keepForeign(se.set, from, se.live) {
				pt.metaDirty = true
			}
			continue
		}
		if ls := pt.ru.live[set.Index]; se.live > ls[from] {
			ls[from] = se.live
			pt.metaDirty = true
		}
		if es := pt.ru.ends[set.Index]; se.end > es[from] {
			es[from] = se.end
			if d := slices.Min(es); d > pt.ru.done[set.Index] {
				pt.ru.done[set.Index] = d
				moved = true
			}
		}
	}
	if moved {
		pt.metaDirty = true
		pt.closeDue(ctx)
	}
}

// onPartial merges a source partition's partial into the owner's state of the callback's key.
func (pt *partition) onPartial(ctx goka.Context, m *partialMsg) {
	e := pt.e
	set, why := m.resolve(e.plan)
	if set != nil && !strings.HasPrefix(ctx.Key(), plan.RollupStateKey(set.Name, "")) {
		set, why = nil, fmt.Sprintf("the key is not one of set %q", set.Name)
	}
	if set == nil {
		// A partial of a set this version of the topology does not have (removed, renamed, or not
		// a rollup any more), sent by another version: nothing here can take it. Counted and
		// logged; never a stop (it would stop again at every restart) and never a total.
		name := m.setName
		if name == "" {
			name = "#" + strconv.Itoa(int(m.set))
		}
		e.m.rollupUnknown.WithLabelValues(name).Inc()
		e.log.Warn("partial total of a rollup set this topology does not have: ignored", "key", ctx.Key(), "from", m.from, "why", why)
		if m.setName != "" && m.final {
			pt.floorForeign(ctx, m)
		}
		return
	}
	if m.end <= pt.ru.done[set.Index] {
		// Every source partition sent its final partial of the window before it said so: this is
		// one sent again (a replay, or a contribution still held at a restart), and the window's
		// total is final, whatever the grace says now.
		pt.e.m.rollupIgnored.WithLabelValues(set.Name).Inc()
		return
	}
	ent, err := pt.load(ctx)
	if err != nil {
		e.fail(ctx, err)
		return
	}
	isNew := ent == nil
	pruned := false
	if isNew {
		ent = &state.Entity{}
	} else {
		// Closed windows that may leave (final acknowledged, progress recorded) leave now, as an
		// entity's do at its next event. Left to the close message FinalRetention later, an owner
		// kept every window closed in that time: a catch-up or a backfill, hours of event time a
		// minute, grew it past MaxMessageBytes and its partials were dead-lettered as too large.
		pruned = pt.prune(ctx.Key(), ent)
	}
	before := len(ent.Windows)
	mi, si, hadMerged := pt.slotsOf(ent, set, m)
	if mi < 0 {
		pt.e.m.rollupIgnored.WithLabelValues(set.Name).Inc()
		if pruned {
			// What prune dropped (and counted gone) must leave the table too: the next load
			// reads the table, and would drop and count it again.
			pt.set(ctx, ent)
		}
		return // its slot is final, or the window was given up
	}
	mi = pt.takePartial(ctx, ent, set, m, mi, si)
	early := pt.earlyTotal(set, ent, mi)
	n := pt.stateSize(ent)
	if n > e.plan.MaxMessageBytes/4 && pt.ru.done[set.Index] > pt.ru.metaDone[set.Index] {
		// The windows closed since the partition's record was written leave only once it holds
		// the progress that closed them: write it now (a nudge), not at the next tick, so that
		// a catch-up, hours of event time between two ticks, does not fill the owner.
		pt.metaDirty, pt.recordWanted = true, true
		pt.nudge(ctx)
	}
	if n > e.plan.MaxMessageBytes {
		if mi = pt.fitOwnerState(ctx, ent, set, m, mi, n); ent.Windows[mi].Final {
			early = nil
		}
	}
	ent.StreamTime = max(ent.StreamTime, pt.closeST())
	opened := 1 // slots are held, not open: only the merged window (or its marker) has a close to come
	if hadMerged {
		opened = 0
	}
	pt.windowsDelta(opened, len(ent.Windows)-before)
	pt.set(ctx, ent)
	pt.ownerWrote(ctx.Key(), set.Index, m.end)
	if isNew {
		pt.entities.Inc()
	}
	if early != nil {
		e.emit(ctx, rollupValue(ctx.Key(), set), set, &early.window, early.values, false)
	}
	pt.schedule(ctx.Key(), ent)
}

// floorForeign makes sure that the window of a partial this owner ignored (its set is another
// version's, in a rolling rollout) gets no total from the version that has the set: a total
// would lack the share. It sends itself, through its own tick key, the sender's progress with a
// live-from at the window's end and no end: Kafka holds it before the partial is committed,
// whatever crashes, and its callback writes the partition's record (onProgress, keepForeign).
// Once this partition runs the set, the same message raises the sender's live-from there.
func (pt *partition) floorForeign(ctx goka.Context, m *partialMsg) {
	if int(pt.id) >= len(pt.e.tickKeys) {
		return
	}
	msg := &loopMsg{kind: loopProgress, partition: m.from, offset: minTime, byEnd: true,
		ends: []setEnd{{set: m.setName, end: minTime, live: m.end}}}
	ctx.Loopback(pt.e.tickKeys[pt.id], msg.encode())
}

// keepForeign takes in a source partition's live-from of a rollup set this version has not, and
// reports whether it changed what the record should hold.
func (v *rollupView) keepForeign(set string, from int32, live int64) bool {
	f := v.foreign[set]
	if f == nil {
		f = slices.Repeat([]int64{minTime}, len(v.progress))
		v.foreign[set] = f
	}
	if from < 0 || int(from) >= len(f) || live <= f[from] {
		return false
	}
	f[from] = live
	return true
}

// slotsOf finds, or makes, the merged window of m's window in an owner's state and m's source
// partition's slot in it, and reports whether the merged window was there; mi is -1 when the
// partial changes nothing: its slot is final, or the window was given up.
func (pt *partition) slotsOf(ent *state.Entity, set *plan.Set, m *partialMsg) (mi, si int, hadMerged bool) {
	slot := state.SlotKey(m.from)
	si = ent.FindKey(set.Index, m.start, slot)
	if si >= 0 && ent.Windows[si].Final {
		return -1, -1, false
	}
	mi = ent.FindKey(set.Index, m.start, "")
	if hadMerged = mi >= 0; hadMerged && ent.Windows[mi].Final {
		return -1, -1, false
	}
	if mi < 0 {
		ent.Windows = append(ent.Windows, state.Window{Set: set.Index, Start: m.start, End: m.end})
		mi = len(ent.Windows) - 1
	}
	if si < 0 {
		ent.Windows = append(ent.Windows, state.Window{Set: set.Index, Start: m.start, End: m.end, Key: slot})
		si = len(ent.Windows) - 1
	}
	return mi, si, hadMerged
}

// takePartial applies m to the owner's merged window mi and slot si: an early partial replaces
// the slot's, a final one is merged into the window and leaves the slot final, a failed one gives
// the window up. It returns the index of the merged window (or of its marker).
func (pt *partition) takePartial(ctx goka.Context, ent *state.Entity, set *plan.Set, m *partialMsg, mi, si int) int {
	e := pt.e
	switch {
	case m.failed && m.userError:
		return pt.giveUp(ctx, ent, set, m, deadletter.UserError, fmt.Sprintf("cannot be computed: user code could not merge a contribution to the partial total of source partition %d (its dead letter names the entity)", m.from))
	case m.failed:
		return pt.giveUp(ctx, ent, set, m, deadletter.TooLarge, fmt.Sprintf("cannot be made: the partial total of source partition %d is larger than a message (MaxMessageBytes %d)",
			m.from, e.plan.MaxMessageBytes))
	case !m.final:
		ent.Windows[si].Aggs, ent.Windows[si].Revision, ent.Windows[si].Absent = m.aggs, m.revision, m.absent
		return mi
	}
	accs, err := accumulators(set, ent, mi)
	if err == nil {
		var part []plan.Accumulator
		if part, err = decodeAccs(set, m.aggs); err == nil {
			err = mergeInto(set, accs, part)
		}
	}
	if err != nil {
		// User code cannot read or merge the partial: the window cannot be whole.
		e.m.panics.WithLabelValues("close").Inc()
		e.log.Error("partial total of a rollup cannot be merged: its window's final is dead-lettered", "set", set.Name, "key", ctx.Key(), "from", m.from, "err", err)
		return pt.giveUp(ctx, ent, set, m, deadletter.UserError, fmt.Sprintf("cannot be computed: the partial total of source partition %d cannot be merged: %v", m.from, err))
	}
	storeAccs(&ent.Windows[mi], accs)
	ent.Windows[mi].Revision += m.revision
	ent.Windows[mi].Absent = plan.UnionAbsent(ent.Windows[mi].Absent, m.absent)
	ent.Windows[si].Final, ent.Windows[si].Aggs, ent.Windows[si].Revision = true, nil, m.revision
	return mi
}

// earlyTotal is the early total of an EarlyEvery set's merged window mi when one is due (its
// LastEmit moves), or nil.
func (pt *partition) earlyTotal(set *plan.Set, ent *state.Entity, mi int) *update {
	lw := &ent.Windows[mi]
	now := pt.e.cfg.Now()
	if set.Emit != plan.EmitEarly || lw.Final || (lw.LastEmit != 0 && now.Sub(time.UnixMilli(lw.LastEmit)) < set.EmitEvery) {
		return nil
	}
	vs, rev, err := pt.mergedValues(set, ent, mi)
	if err != nil || len(vs) == 0 || pt.ownerBeforeLive(set, lw) {
		return nil // the final will say why, dead-lettered; or there is no value to show
	}
	lw.LastEmit = now.UnixMilli()
	u := &update{set: set, window: *lw, values: vs}
	u.window.Revision = rev
	return u
}

// fitOwnerState makes an owner's state of n bytes, more than a message, fit: the early partials of
// its slots not final yet go first (they only serve early totals), the ones of every window of the
// key; if it still does not fit, m's window is given up. It returns the merged window's index.
func (pt *partition) fitOwnerState(ctx goka.Context, ent *state.Entity, set *plan.Set, m *partialMsg, mi, n int) int {
	e := pt.e
	dropped := 0
	for i := range ent.Windows {
		if w := &ent.Windows[i]; w.Key != "" && !w.Final && w.Aggs != nil {
			w.Aggs, dropped = nil, dropped+1
		}
	}
	n2 := pt.stateSize(ent)
	e.log.Warn("rollup owner state too large for a message: early partials dropped", "set", set.Name, "key", ctx.Key(),
		"bytes", n, "without_early", n2, "dropped", dropped, "limit", e.plan.MaxMessageBytes)
	if n2 <= e.plan.MaxMessageBytes {
		return mi
	}
	return pt.giveUp(ctx, ent, set, m, deadletter.TooLarge, fmt.Sprintf("cannot be kept: merging the partial totals makes the owner's state %d bytes, more than the limit of %d (MaxMessageBytes)",
		n2, e.plan.MaxMessageBytes))
}

// ownerWrote records the write of an owner's window of set that ends at end, not acknowledged yet.
func (pt *partition) ownerWrote(key string, set uint16, end int64) {
	b := pt.e.cfg.Durability.Sent()
	if b <= pt.acked {
		return
	}
	ws := pt.ru.writes[key]
	for len(ws) > 0 && ws[0].bound <= pt.acked { // in the order sent: the acknowledged ones first
		ws = ws[1:]
	}
	pt.ru.writes[key] = append(ws, ownerWrite{set: set, end: end, bound: b})
}

// giveUp dead-letters the final total of m's window of the owner's key, which cannot be whole,
// and leaves of the window only a marker (its merged window, Final) by which later partials for
// it are ignored and nothing is emitted: stopping instead would stop at it after every restart.
// It returns the marker's index.
func (pt *partition) giveUp(ctx goka.Context, ent *state.Entity, set *plan.Set, m *partialMsg, reason deadletter.Reason, why string) int {
	marker := state.Window{Set: set.Index, Start: m.start, End: m.end, Final: true}
	pt.e.deadLetterWindow(ctx, pt.id, rollupValue(ctx.Key(), set), set, &marker, reason, why)
	kept := ent.Windows[:0]
	for _, w := range ent.Windows {
		if w.Set != set.Index || w.Start != m.start {
			kept = append(kept, w)
		}
	}
	ent.Windows = append(kept, marker)
	return len(ent.Windows) - 1
}

// ownerDurable reports whether the writes of an owner's windows that its sources' progress has
// completed are acknowledged. Later writes change only windows still open: a restart finds the
// closed ones as they are now.
func (pt *partition) ownerDurable(entity string) bool {
	ws := pt.ru.writes[entity]
	kept := ws[:0]
	ok := true
	for _, w := range ws {
		if w.bound <= pt.acked {
			continue
		}
		kept = append(kept, w)
		if w.end <= pt.ru.done[w.set] {
			ok = false
		}
	}
	if len(kept) == 0 {
		delete(pt.ru.writes, entity)
	} else {
		pt.ru.writes[entity] = kept
	}
	return ok
}

// decodeAccs decodes a partial's accumulators.
func decodeAccs(set *plan.Set, aggs [][]byte) (accs []plan.Accumulator, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if len(aggs) != len(set.Aggs) {
		return nil, fmt.Errorf("partial has %d aggregations, the set %d", len(aggs), len(set.Aggs))
	}
	return set.DecodeAccs(aggs)
}

// mergedValues is the total of an owner's merged window mi (plan.Set.OwnerTotal), named. User
// code runs in it out of any record's callback: a panic is returned as an error.
func (pt *partition) mergedValues(set *plan.Set, ent *state.Entity, mi int) (vs []totals.Value, rev uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	accs, rev, absent, err := set.OwnerTotal(ent, mi)
	if err != nil {
		return nil, 0, err
	}
	return set.Values(accs, absent), rev, nil
}

// emitMerged emits the final total of an owner's merged window mi.
func (pt *partition) emitMerged(ctx goka.Context, entity string, set *plan.Set, ent *state.Entity, mi int) {
	e := pt.e
	if ent.Windows[mi].Final {
		return // dead-lettered: too large to keep
	}
	vs, rev, err := pt.mergedValues(set, ent, mi)
	w := ent.Windows[mi]
	if err != nil {
		e.m.panics.WithLabelValues("close").Inc()
		e.log.Error("final total of a rollup window cannot be computed: dead-lettered", "set", set.Name, "key", entity, "window_start", w.Start, "err", err)
		e.deadLetterFinal(ctx, pt.id, entity, set, &w, err)
		return
	}
	if (len(vs) == 0 && len(set.Aggs) > 0) || pt.ownerBeforeLive(set, &w) {
		// A source partition's share started before it ran the set (its contribution says so,
		// or its progress): the window has missed events there, and gets no total.
		e.m.beforeLive.WithLabelValues(set.Name).Inc()
		return
	}
	w.Revision = rev
	e.emit(ctx, rollupValue(entity, set), set, &w, vs, true)
}

// ownerClosesAt is when an owner's window of set closes: when every source partition's progress
// passes its end plus grace (no floor: a partition's floor only closes it earlier there).
func ownerClosesAt(set *plan.Set, w *state.Window) int64 { return w.Span().ClosesAt(set.Grace) }
