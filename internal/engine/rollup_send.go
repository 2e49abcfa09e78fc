package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/windows"
)

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
