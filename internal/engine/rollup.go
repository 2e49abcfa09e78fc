package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/internal/wire"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/totals"
	"github.com/abacus-stream/abacus/windows"
)

// Rollups (docs/DESIGN.md, Rollups). A rollup set's windows are keyed by a rollup key, not by the
// entity. The entity that applies an event keeps its contribution per (rollup key, window) in
// its own state (a window with Key set), judged, fenced and closed like any window of it. Its
// partition merges its entities' contributions into a partial total per (set, key, window) when
// they close, and sends it, absolute, to the key's owner through the loop topic
// (RollupStateKey). The owner keeps per window the merge of the final partials it received and a
// slot per source partition, so a partial sent again replaces its slot or, once the slot is
// final, changes nothing. Every partition tells every other, by a progress message to its tick
// key, up to which stream time its final partials are all sent and acknowledged; once every
// partition's progress passes a window's close, the owner emits its one final total.

// partialKey names a partition's partial total of one rollup key's window.
type partialKey struct {
	set   uint16
	key   string
	start int64
}

// partial is a partition's share of one rollup key's window: which of its entities contribute,
// the merge of the contributions of those closed so far, and, once all are, the final partial
// sent and waiting for Kafka's acknowledgement.
type partial struct {
	end          int64
	closes       int64           // the stream time at which the window closes here
	contributors map[string]bool // entity -> its contribution is merged into accs
	merged       int
	accs         []plan.Accumulator
	revision     uint64
	sent         bool
	failed       bool   // a contribution could not be merged: the final partial goes as failed
	bound        uint64 // Sent bound of the final partial, once sent
	// absent are the aggregations that a contribution lacks (state.Window.Absent): the partial
	// lacks them too.
	absent []int
	// early is the running merge of the window's events, for the early partials of an EmitEarly
	// set (rebuilt from the contributions after a restart).
	early    []plan.Accumulator
	earlyRev uint64
	changed  bool // early changed since the last early partial
	lastSend time.Time
}

// rollupView is what a partition keeps for rollups, as a source partition and as an owner.
type rollupView struct {
	partials map[partialKey]*partial
	closing  map[int64]int // close time -> partials not done with it, for progress
	inflight []partialKey  // final partials sent, in order, until acknowledged
	sentT    int64         // the progress last sent to the other partitions
	prunes   []retainedEntry

	// As an owner, per rollup set (by index in the plan): ends[s][p] is the end up to which
	// source partition p has sent the final partials of every window of set s; done[s], the
	// smallest of them, the end up to which the owner has every partial of every window
	// (minTime: not known yet), and metaDone[s] what the last acknowledged record holds. A merged
	// window is final once its end is at most done: whatever grace each sender ran with, which
	// changes with the topology, it has sent its share by then. progress[p] is source partition p's
	// stream time as it last said, which only an idle partition follows. dues holds, per set, the
	// owner keys with a merged window not emitted yet.
	ends map[uint16][]int64
	live map[uint16][]int64 // per set: from when each source partition runs it (setEnd.live)
	// foreign holds, by set name, the live-froms of rollup sets this version does not have
	// (another version's, in a rolling rollout), kept in the record for the version that has
	// them: the senders' own, raised to the end of every final partial this owner had to ignore,
	// so that the version with the set gives those windows no total instead of a total short of
	// a share. Their ends are not kept: this version did not keep the set's partials either, so
	// the version with the set learns the ends again from the senders' progress, which carries
	// their live-froms too.
	foreign  map[string][]int64
	done     map[uint16]int64
	metaDone map[uint16]int64
	progress []int64
	dues     map[uint16]*closeHeap
	// writes holds, per owner key, its windows' last writes not acknowledged yet: a window's
	// final waits for the write that last changed it, not for the key's later writes.
	writes map[string][]ownerWrite

	// durableST is the largest stream time that an acknowledged write of the partition carries
	// (an entity's StreamTime): a restart rebuilds its stream time to at least that, as it does
	// to the record's (an entity leaves the table only once the record covers it). stFlight are
	// the writes that carry a larger one, not acknowledged yet, in the order sent.
	durableST int64
	stFlight  []stWrite
	// doneClose is the largest close of a final partial acknowledged: until the progress sent
	// passes it, owners wait for the partition.
	doneClose int64
}

// stWrite is a write carrying stream time st, held by Kafka once Acknowledged reaches bound.
type stWrite struct {
	st    int64
	bound uint64
}

// wroteST records a write that carries stream time st, with its Sent bound.
func (v *rollupView) wroteST(st int64, bound, acked uint64) {
	if st <= v.durableST || (len(v.stFlight) > 0 && st <= v.stFlight[len(v.stFlight)-1].st) {
		return // a later-sent write carries it or more already
	}
	if bound <= acked {
		v.durableST = st
		return
	}
	v.stFlight = append(v.stFlight, stWrite{st, bound})
}

// settleST moves durableST on with the writes Kafka acknowledged.
func (v *rollupView) settleST(acked uint64) {
	n := 0
	for n < len(v.stFlight) && v.stFlight[n].bound <= acked {
		v.durableST = max(v.durableST, v.stFlight[n].st)
		n++
	}
	v.stFlight = v.stFlight[n:]
}

// ownerWrite is a write of an owner's window of set whose end is end, and Kafka holds it once
// Acknowledged reaches bound.
type ownerWrite struct {
	set   uint16
	end   int64
	bound uint64
}

func newRollupView(p *plan.Plan, npar int) rollupView {
	v := rollupView{partials: map[partialKey]*partial{}, closing: map[int64]int{}, sentT: minTime, durableST: minTime, doneClose: minTime,
		ends: map[uint16][]int64{}, live: map[uint16][]int64{}, done: map[uint16]int64{}, metaDone: map[uint16]int64{}, progress: make([]int64, npar),
		dues: map[uint16]*closeHeap{}, writes: map[string][]ownerWrite{}, foreign: map[string][]int64{}}
	for i := range v.progress {
		v.progress[i] = minTime
	}
	for _, set := range p.Sets {
		if set.Rollup == nil {
			continue
		}
		v.ends[set.Index] = slices.Repeat([]int64{minTime}, npar)
		v.live[set.Index] = slices.Repeat([]int64{minTime}, npar)
		v.done[set.Index], v.metaDone[set.Index] = minTime, minTime
		h := newCloseHeap()
		v.dues[set.Index] = &h
	}
	return v
}

// ownerST is the stream time, in the owner's terms (a window's end plus its set's grace), up to
// which the owner has every partial of set's windows: a merged window closes when its
// ownerClosesAt reaches it. done holds ends; the grace only puts them in the terms the close heap
// and the emissions use.
func ownerST(set *plan.Set, done int64) int64 {
	if done == minTime {
		return minTime
	}
	return done + set.Grace
}

// ownerBeforeLive reports whether an owner's window of set started before a source partition ran
// the set: that partition's share of it is not whole, whatever it sent.
func (pt *partition) ownerBeforeLive(set *plan.Set, w *state.Window) bool {
	return w.Start < slices.Max(pt.ru.live[set.Index])
}

// ownerSetOf is the set of an owner key's merged windows, or nil when it holds none.
func (pt *partition) ownerSetOf(ent *state.Entity) *plan.Set {
	for i := range ent.Windows {
		if ent.Windows[i].Key == "" {
			return pt.e.plan.Sets[ent.Windows[i].Set]
		}
	}
	return nil
}

// isOwnerKey reports whether a state key is a rollup key's owner state.
func isOwnerKey(key string) bool { return strings.HasPrefix(key, plan.RollupKeyPrefix) }

// rollupValue is the rollup key of owner state key for set.
func rollupValue(key string, set *plan.Set) string {
	return strings.TrimPrefix(key, plan.RollupStateKey(set.Name, ""))
}

// contribution is a window of a rollup set an applied event added to, for the partition's
// partial once the event is committed.
type contribution struct {
	set     *plan.Set
	key     string
	w       windows.Window
	created bool // the entity's first event in this window: it becomes a contributor
}

// contribute records that entity contributes to the partial of (set, key, w), and, for an
// EmitEarly set, adds the event to its running total and sends an early partial when due.
func (pt *partition) contribute(ctx goka.Context, entity string, c contribution, ev plan.Event, t int64, now time.Time) {
	if !c.created && c.set.Emit != plan.EmitEarly {
		return // a contributor already: nothing to do until its window closes
	}
	p := pt.partialOf(c.set, c.key, c.w)
	if _, ok := p.contributors[entity]; !ok {
		p.contributors[entity] = false
	}
	if c.set.Emit != plan.EmitEarly {
		return
	}
	for _, a := range p.early {
		a.Add(ev, t)
	}
	p.earlyRev++
	p.changed = true
	if now.Sub(p.lastSend) >= c.set.EmitEvery {
		pt.sendEarly(ctx, partialKey{c.set.Index, c.key, c.w.Start}, p, now)
	}
}

// partialOf returns the partial of (set, key, w), made if new.
func (pt *partition) partialOf(set *plan.Set, key string, w windows.Window) *partial {
	pk := partialKey{set.Index, key, w.Start}
	p := pt.ru.partials[pk]
	if p != nil {
		return p
	}
	p = &partial{end: w.End, closes: pt.closesAt(set, w), contributors: map[string]bool{}, accs: newAccs(set)}
	if set.Emit == plan.EmitEarly {
		p.early = newAccs(set)
	}
	pt.ru.partials[pk] = p
	pt.ru.closing[p.closes]++
	return p
}

func newAccs(set *plan.Set) []plan.Accumulator {
	accs := make([]plan.Accumulator, len(set.Aggs))
	for k, a := range set.Aggs {
		accs[k] = a.New()
	}
	return accs
}

// registerContributions takes an entity read from the table at a rebuild into the partials.
func (pt *partition) registerContributions(entity string, ent *state.Entity) error {
	if isOwnerKey(entity) {
		return nil // an owner's slots are partials received, not contributions
	}
	for i := range ent.Windows {
		w := &ent.Windows[i]
		set := pt.e.plan.Sets[w.Set]
		if set.Rollup == nil || w.Key == "" {
			continue
		}
		p := pt.partialOf(set, w.Key, w.Span())
		p.contributors[entity] = false
		p.absent = plan.UnionAbsent(p.absent, w.Absent)
		if p.early != nil {
			accs, err := accumulators(set, ent, i)
			if err != nil {
				return fmt.Errorf("entity %q: %w", entity, err)
			}
			if err := mergeInto(set, p.early, accs); err != nil {
				return fmt.Errorf("entity %q: %w", entity, err)
			}
			p.earlyRev += w.Revision
		}
	}
	return nil
}

// mergeInto merges accs into into, aggregation by aggregation.
func mergeInto(set *plan.Set, into, accs []plan.Accumulator) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	for k := range into {
		if err := into[k].Merge(accs[k]); err != nil {
			return fmt.Errorf("merge %q: %w", set.Aggs[k].Name, err)
		}
	}
	return nil
}

// mergeContribution merges the entity's closed contribution window i into its partial, and
// sends the partial once every contributor's is merged.
func (pt *partition) mergeContribution(ctx goka.Context, entity string, ent *state.Entity, i int) {
	w := &ent.Windows[i]
	set := pt.e.plan.Sets[w.Set]
	pk := partialKey{w.Set, w.Key, w.Start}
	p := pt.ru.partials[pk]
	if p == nil || p.sent || p.contributors[entity] {
		return // sent and acknowledged, or merged already
	}
	accs, err := accumulators(set, ent, i)
	if err == nil {
		err = mergeInto(set, p.accs, accs)
	}
	if err != nil {
		// User code cannot read or merge this contribution: the entity's share is dead-lettered
		// as a final total would be, and the partial goes as failed, so that the owner
		// dead-letters the window's total rather than emit one without this share.
		pt.e.m.panics.WithLabelValues("close").Inc()
		pt.e.log.Error("contribution to a rollup cannot be merged: dead-lettered", "set", set.Name, "entity", entity, "key", w.Key, "window_start", w.Start, "err", err)
		pt.e.deadLetterFinal(ctx, pt.id, entity, set, w, err)
		p.failed = true
	} else {
		p.revision += w.Revision
		p.absent = plan.UnionAbsent(p.absent, w.Absent)
	}
	p.contributors[entity] = true
	p.merged++
	if p.merged == len(p.contributors) {
		pt.sendFinal(ctx, pk, p)
	}
}

// sendFinal sends a partial whose contributions are all merged to its key's owner, as final.
func (pt *partition) sendFinal(ctx goka.Context, pk partialKey, p *partial) {
	set := pt.e.plan.Sets[pk.set]
	if p.failed {
		m := &partialMsg{setName: set.Name, set: set.Index, start: pk.start, end: p.end, from: pt.id, final: true, failed: true, userError: true, revision: p.revision}
		ctx.Loopback(plan.RollupStateKey(set.Name, pk.key), m.encode())
	} else {
		pt.sendPartial(ctx, set, pk, p.end, p.revision, p.accs, p.absent, true)
	}
	p.sent, p.bound = true, pt.e.cfg.Durability.Sent()
	p.early = nil
	pt.ru.inflight = append(pt.ru.inflight, pk)
	pt.e.m.rollupPartials.WithLabelValues(set.Name, "true").Inc()
	pt.nudge(ctx) // the progress waits for its acknowledgement: look again soon, even if idle
}

// sendEarly sends the running partial of an EmitEarly window to its key's owner.
func (pt *partition) sendEarly(ctx goka.Context, pk partialKey, p *partial, now time.Time) {
	set := pt.e.plan.Sets[pk.set]
	pt.sendPartial(ctx, set, pk, p.end, p.earlyRev, p.early, p.absent, false)
	p.changed, p.lastSend = false, now
	pt.e.m.rollupPartials.WithLabelValues(set.Name, "false").Inc()
}

func (pt *partition) sendPartial(ctx goka.Context, set *plan.Set, pk partialKey, end int64, revision uint64, accs []plan.Accumulator, absent []int, final bool) {
	m := newPartial(set, pk.start, end, pt.id, final, revision, accs, absent)
	b := m.encode()
	if n := len(b) + len(plan.RollupStateKey(set.Name, pk.key)); n > pt.e.plan.MaxMessageBytes {
		// Kafka would refuse it, and the processor would stop on it at every restart. An early
		// partial is skipped; a final one goes as "failed": the owner dead-letters the window's
		// final (it cannot be whole) instead of closing it without this partition's share.
		pt.e.log.Warn("rollup partial total too large for a message", "set", set.Name, "key", pk.key, "window_start", pk.start,
			"final", final, "bytes", n, "limit", pt.e.plan.MaxMessageBytes)
		if !final {
			return
		}
		m.named, m.failed = nil, true
		b = m.encode()
	}
	ctx.Loopback(plan.RollupStateKey(set.Name, pk.key), b)
}

// settleRollups takes in the final partials Kafka acknowledged: they are done, their
// contributions may leave their entities, and the partition's progress may move.
func (pt *partition) settleRollups(ctx goka.Context) {
	now := pt.e.cfg.Now()
	pt.ru.settleST(pt.acked)
	n := 0
	for n < len(pt.ru.inflight) {
		pk := pt.ru.inflight[n]
		p := pt.ru.partials[pk]
		if p.bound > pt.acked {
			break
		}
		n++
		delete(pt.ru.partials, pk)
		pt.ru.doneClose = max(pt.ru.doneClose, p.closes)
		if pt.ru.closing[p.closes]--; pt.ru.closing[p.closes] == 0 {
			delete(pt.ru.closing, p.closes)
		}
		for entity := range p.contributors {
			pt.ru.prunes = append(pt.ru.prunes, retainedEntry{at: now.Add(pt.e.cfg.FinalRetention), entity: entity})
		}
	}
	pt.ru.inflight = pt.ru.inflight[n:]
	pt.sendProgress(ctx)
}

// progressT is how far the partition's final partials are all sent and acknowledged: the stream
// time Kafka holds (a restart resumes from no earlier one, so no window closed by it can take an
// event again), short of the first window whose partial is not done.
func (pt *partition) progressT() int64 {
	// The record's stream time, its idle advance (applied at any restart), or the stream time
	// an acknowledged entity write carries, whichever is furthest: a restart resumes from it.
	t := max(pt.metaST, pt.metaIdleST, pt.ru.durableST)
	for c := range pt.ru.closing {
		t = min(t, c-1)
	}
	return t
}

// sendProgress tells every partition the partition's progress when it moved: its stream time,
// and, per rollup set, the end up to which it has sent the final partial of every window (by its
// own grace, and the set's floor).
func (pt *partition) sendProgress(ctx goka.Context) {
	t := pt.progressT()
	if t == minTime || t <= pt.ru.sentT || len(pt.e.tickKeys) == 0 {
		return
	}
	if pt.ru.sentT != minTime && t < pt.e.nextRollupClose(pt.ru.sentT) {
		return // no rollup window closes in between: the owners would learn nothing
	}
	pt.ru.sentT = t
	m := &loopMsg{kind: loopProgress, partition: pt.id, offset: t, byEnd: true}
	for _, set := range pt.e.plan.Sets {
		if set.Rollup == nil {
			continue
		}
		end := t - set.Grace
		if f := pt.floors[set.Index]; t >= f.at {
			end = max(end, f.through)
		}
		m.ends = append(m.ends, setEnd{set: set.Name, end: end, live: pt.liveFrom[set.Index]})
	}
	msg := m.encode()
	for _, k := range pt.e.tickKeys {
		ctx.Loopback(k, msg)
	}
}

// nextRollupClose is the first close of any rollup set's window after stream time x: windows of
// a set end at whole multiples of its advance plus its size, so their closes are known without
// looking at any state. Progress that passes none of them tells an owner nothing new.
func (e *Engine) nextRollupClose(x int64) int64 {
	next := int64(math.MaxInt64)
	for _, s := range e.plan.Sets {
		if s.Rollup == nil {
			continue
		}
		adv, off := s.Window.Advance(), s.Window.Size()+s.Grace
		if adv <= 0 {
			continue
		}
		k := (x - off) / adv
		if (x-off)%adv != 0 && (x-off) < 0 {
			k-- // floor
		}
		next = min(next, (k+1)*adv+off)
	}
	return next
}

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
	if isNew {
		ent = &state.Entity{}
	}
	before := len(ent.Windows)
	mi, si, hadMerged := pt.slotsOf(ent, set, m)
	if mi < 0 {
		pt.e.m.rollupIgnored.WithLabelValues(set.Name).Inc()
		return // its slot is final, or the window was given up
	}
	mi = pt.takePartial(ctx, ent, set, m, mi, si)
	early := pt.earlyTotal(set, ent, mi)
	if n := pt.stateSize(ent); n > e.plan.MaxMessageBytes {
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

// sendDueEarly sends the early partials that changed since their last one and are due.
func (pt *partition) sendDueEarly(ctx goka.Context, now time.Time) {
	for pk, p := range pt.ru.partials {
		if p.changed && !p.sent {
			if set := pt.e.plan.Sets[pk.set]; now.Sub(p.lastSend) >= set.EmitEvery {
				pt.sendEarly(ctx, pk, p, now)
			}
		}
	}
}

// pruneContributions sends a close message to entities whose contributions' partials are done,
// once FinalRetention has given their next write the chance to drop them.
func (pt *partition) pruneContributions(ctx goka.Context, now time.Time) {
	n := 0
	seen := map[string]bool{}
	for n < len(pt.ru.prunes) && !pt.ru.prunes[n].at.After(now) {
		entity := pt.ru.prunes[n].entity
		n++
		if seen[entity] {
			continue
		}
		seen[entity] = true
		if c, ok := pt.cache[entity]; ok && !pt.hasDoneContribution(c) {
			continue // its write since dropped them
		}
		ctx.Loopback(entity, (&loopMsg{kind: loopClose}).encode())
	}
	pt.ru.prunes = pt.ru.prunes[n:]
}

// hasDoneContribution reports whether the entity holds a contribution whose partial is done.
func (pt *partition) hasDoneContribution(ent *state.Entity) bool {
	for i := range ent.Windows {
		if pt.contributionDone(&ent.Windows[i]) {
			return true
		}
	}
	return false
}

// contributionDone reports whether w is a contribution to a rollup whose partial Kafka holds as
// final: the partial was made for every contribution of the table or of an applied event, and
// leaves the partition only once acknowledged.
func (pt *partition) contributionDone(w *state.Window) bool {
	if w.Key == "" || pt.e.plan.Sets[w.Set].Rollup == nil || pt.windowClosesAt(w) > pt.closeST() {
		return false
	}
	_, open := pt.ru.partials[partialKey{w.Set, w.Key, w.Start}]
	return !open
}

// ownerClosesAt is when an owner's window of set closes: when every source partition's progress
// passes its end plus grace (no floor: a partition's floor only closes it earlier there).
func ownerClosesAt(set *plan.Set, w *state.Window) int64 { return w.Span().ClosesAt(set.Grace) }

// partialMsg is a partial total sent to a rollup key's owner. It names its set and aggregations
// (loopPartialNamed), so that an owner running another version of the topology (sets or
// aggregations added, removed or reordered, during a rolling rollout or across a restart) finds
// them, or knows it has them not. Encoding after the kind byte:
//
//	string set, varint start, uvarint end - start, varint source partition, byte final (0 early,
//	1 final, 2 final but failed: too large to send, 3 failed: user code could not merge), uvarint
//	revision, uvarint #aggs, each: string name, string kind, uvarint len + bytes.
//
// An aggregation the sender's window lacks (state.Window.Absent) is not listed. Partials of
// earlier versions (loopPartial) named the set by its position and listed every aggregation in
// order: uvarint set instead of the name, and each aggregation as uvarint len + bytes.
type partialMsg struct {
	setName    string // as sent (loopPartialNamed); empty in a partial of an earlier version
	set        uint16 // the set's position: the sender's in a partial of an earlier version; this plan's once resolved
	start, end int64
	from       int32
	final      bool
	failed     bool // final, but failed: the owner gives the window up
	userError  bool // failed because user code could not merge a contribution (else: too large)
	revision   uint64
	named      []namedAgg // as sent
	// aggs are the accumulators by position: as sent in a partial of an earlier version, and in
	// this plan's set once resolved (nil for an aggregation the partial does not have, listed in
	// absent).
	aggs   [][]byte
	absent []int
}

// namedAgg is one aggregation's accumulator in a partial, with the name and kind it has in the
// sender's topology.
type namedAgg struct {
	name, kind string
	value      []byte
}

// newPartial is the partial of set's window (start, end) from source partition from, carrying
// accs but for the absent aggregations.
func newPartial(set *plan.Set, start, end int64, from int32, final bool, revision uint64, accs []plan.Accumulator, absent []int) *partialMsg {
	m := &partialMsg{setName: set.Name, set: set.Index, start: start, end: end, from: from, final: final, revision: revision}
	for k, a := range accs {
		if !slices.Contains(absent, k) {
			m.named = append(m.named, namedAgg{name: set.Aggs[k].Name, kind: set.Aggs[k].Kind, value: a.AppendBinary(nil)})
		}
	}
	return m
}

// encode writes m as sent: by names, or, for a partial of an earlier version read back (no set
// name), as that version did, by position.
func (m *partialMsg) encode() []byte {
	var b []byte
	if m.setName == "" {
		b = append(b, byte(loopPartial))
		b = binary.AppendUvarint(b, uint64(m.set))
	} else {
		b = append(b, byte(loopPartialNamed))
		b = wire.AppendString(b, m.setName)
	}
	b = binary.AppendVarint(b, m.start)
	b = binary.AppendUvarint(b, uint64(m.end-m.start))
	b = binary.AppendVarint(b, int64(m.from))
	switch {
	case m.failed && m.userError:
		b = append(b, 3)
	case m.failed:
		b = append(b, 2)
	case m.final:
		b = append(b, 1)
	default:
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, m.revision)
	if m.setName == "" {
		b = binary.AppendUvarint(b, uint64(len(m.aggs)))
		for _, a := range m.aggs {
			b = binary.AppendUvarint(b, uint64(len(a)))
			b = append(b, a...)
		}
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(m.named)))
	for _, a := range m.named {
		b = wire.AppendString(b, a.name)
		b = wire.AppendString(b, a.kind)
		b = binary.AppendUvarint(b, uint64(len(a.value)))
		b = append(b, a.value...)
	}
	return b
}

// decodePartial reads a partial of either encoding (kind says which).
func decodePartial(kind loopKind, d *wire.Reader) (*partialMsg, error) {
	m := &partialMsg{}
	var set uint64
	if kind == loopPartialNamed {
		m.setName = d.String()
	} else {
		set = d.Uvarint()
		m.set = uint16(set)
	}
	m.start = d.Varint()
	m.end = m.start + int64(d.Uvarint())
	m.from = int32(d.Varint())
	switch f := d.Byte(); f {
	case 0:
	case 1:
		m.final = true
	case 2:
		m.final, m.failed = true, true
	case 3:
		m.final, m.failed, m.userError = true, true, true
	default:
		if d.Err() == nil {
			return nil, fmt.Errorf("%w: partial total with final byte %d", errCorruptLoop, f)
		}
	}
	if set > math.MaxUint16 && d.Err() == nil {
		return nil, fmt.Errorf("%w: partial total of set %d", errCorruptLoop, set)
	}
	m.revision = d.Uvarint()
	n := d.Count()
	for i := 0; i < n && d.Err() == nil; i++ {
		if kind == loopPartialNamed {
			m.named = append(m.named, namedAgg{name: d.String(), kind: d.String(), value: append([]byte(nil), d.Bytes()...)})
		} else {
			m.aggs = append(m.aggs, append([]byte(nil), d.Bytes()...))
		}
	}
	return m, d.Err()
}

// resolve finds m's set in the plan, and lays its aggregations out as the set has them: by name
// (an aggregation the partial lacks, or has under another kind, is absent from it), or, in a
// partial of an earlier version, by position. It says why when the plan has no such rollup set.
func (m *partialMsg) resolve(p *plan.Plan) (*plan.Set, string) {
	if m.setName == "" {
		if int(m.set) >= len(p.Sets) || p.Sets[m.set].Rollup == nil {
			return nil, fmt.Sprintf("set %d (by position, from an earlier version) is not a rollup set of this topology", m.set)
		}
		set := p.Sets[m.set]
		if len(m.aggs) != len(set.Aggs) {
			return nil, fmt.Sprintf("set %d (by position, from an earlier version) has %d aggregations, the partial %d", m.set, len(set.Aggs), len(m.aggs))
		}
		return set, ""
	}
	set := p.SetByName(m.setName)
	if set == nil || set.Rollup == nil {
		return nil, fmt.Sprintf("set %q is not a rollup set of this topology", m.setName)
	}
	m.set = set.Index
	m.aggs = make([][]byte, len(set.Aggs))
	m.absent = nil
	for k, a := range set.Aggs {
		i := slices.IndexFunc(m.named, func(n namedAgg) bool { return n.name == a.Name })
		if i < 0 || m.named[i].kind != a.Kind {
			m.absent = append(m.absent, k)
			continue
		}
		m.aggs[k] = m.named[i].value
	}
	return set, ""
}
