package engine

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/windows"
)

// minTime is "no time yet": the stream time of a partition that has seen no event.
const minTime = math.MinInt64

// originKey names an input of a partition: a source topic (by state.TopicID) and partition.
type originKey struct {
	topic     uint32
	partition int32
}

// origin is what a partition knows of one input.
type origin struct {
	wm          int64     // largest event time applied from it
	lastAdvance time.Time // wall time its watermark last moved
	// expected marks an input the partition reads for sure (a source topic's own partition): the
	// partition's stream time waits for it from the start, even before it has data, so that one
	// source read ahead of another cannot close windows the other still has events for.
	expected bool
	// done is an offset up to which every record of the origin was processed and all that was
	// written for it acknowledged (-1: none): a record at or below it is a replay, whatever
	// became of its entity (state.Origin.Done). candidate is the next done, once Kafka
	// acknowledges the first bound messages.
	done      int64
	latest    int64 // the last offset processed
	candidate struct {
		offset int64
		bound  uint64
		set    bool
	}
}

// floor keeps a set's windows final through a raise of its grace (state.SetGrace): windows that
// end at or before through closed at stream time at, whatever the grace says now.
type floor struct {
	through, at int64
}

// noFloor is the floor of a set whose grace was never raised.
var noFloor = floor{through: math.MinInt64, at: math.MinInt64}

// partition is the in-memory view of one assigned partition. Only that partition's goroutine
// touches it (goka runs one goroutine per partition for all its topics).
type partition struct {
	e     *Engine
	id    int32
	label string
	tbl   storage.Storage // the partition's local table, read to emit other entities' finals

	origins map[originKey]*origin
	eventST int64 // smallest watermark of the origins with data or expected; MinInt64 when none
	idleST  int64 // stream time reached by idle advances that Kafka acknowledged
	// st is the partition's stream time: the largest eventST and idleST ever reached. It never
	// goes back, not even when an input joins with older events than the others'.
	st int64
	// pendingIdle is an idle advance written to the partition's record and not acknowledged yet.
	pendingIdle struct {
		target int64
		bound  uint64
		set    bool
	}

	// The partition's record (state.Partition): layouts it knows, and what of it Kafka holds.
	layouts      map[uint32]*conversion // earlier layouts the partition's entities may have
	recordLayout []state.Layout         // every layout to keep in the record
	metaDirty    bool                   // the record in the table is older than what it should say
	metaFlight   []metaWrite            // record writes not acknowledged yet, oldest first
	metaWM       map[originKey]int64    // origins' watermarks in the last acknowledged record
	metaDone     map[originKey]int64    // origins' done offsets in the last acknowledged record
	metaST       int64                  // stream time in the last acknowledged record
	candidates   int                    // origins with a done candidate
	floors       []floor                // per set of the plan
	// layoutHeld says the acknowledged record describes the current layout. Until it does, one
	// entity, the describer, carries the layout's description at each of its writes, so that
	// whatever part of the partition's writes Kafka holds after a crash, a restart under another
	// topology can read it: the describer's first write comes before every other entity's under
	// this layout, and a partition's writes land in order.
	layoutHeld bool
	describer  string

	due  closeHeap // one entry per entity with a window whose final is not emitted yet
	held int       // windows in the table
	open int       // windows whose final total this process has not emitted

	// writes holds, per entity written and not yet acknowledged, the Sent bound of its last write;
	// waiting are entities whose close waits for that acknowledgement.
	writes  map[string]uint64
	waiting []string
	acked   uint64 // Acknowledged at the last look
	tickKey string // the partition's own key: for its record and messages to itself
	nudged  bool   // a nudge is on its way back

	// cache holds entities as last written or read, decoded and in the current layout: the next
	// event and the close of an entity then need no read and decode of the local table. Every
	// write of the table goes through the engine, so the cache never disagrees with it.
	cache map[string]*state.Entity

	// lates holds, per entity, its records late for every window since its last write: its next
	// write lists those Kafka may not hold yet as pending (state.Entity.Pending).
	lates map[string][]state.Pending

	// emitted remembers, per entity, the final emissions this process made and has not pruned.
	emitted map[string][]emission
	prunes  []retainedEntry // entities with emitted windows, by when a close message may prune them
	queued  map[string]bool // entities in prunes
	empties []string        // entities with no window left, to delete once the record covers them

	// The partition's metric series, looked up once: a label lookup per event costs.
	eventsIn   []prometheus.Counter // per source
	duplicates prometheus.Counter
	lag        prometheus.Gauge
	openGauge  prometheus.Gauge
	heldGauge  prometheus.Gauge
	entities   prometheus.Gauge
	scheduled  prometheus.Gauge
	ticks      prometheus.Counter
	waits      prometheus.Gauge
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

type metaWrite struct {
	bound  uint64
	st     int64
	wm     map[originKey]int64
	done   map[originKey]int64
	layout bool // the record describes the current layout
}

// partition returns the partition's view, rebuilding it from its local table the first time
// after an assignment.
func (e *Engine) partition(id int32) (*partition, error) {
	e.mu.Lock()
	pt, ok := e.parts[id]
	st := e.storages[id]
	e.mu.Unlock()
	if ok {
		return pt, nil
	}
	if st == nil {
		return nil, fmt.Errorf("partition %d: no storage for the group table", id)
	}
	pt = &partition{e: e, id: id, label: strconv.Itoa(int(id)), tbl: st, eventST: math.MinInt64, idleST: math.MinInt64, st: math.MinInt64, metaST: math.MinInt64,
		origins: map[originKey]*origin{}, layouts: map[uint32]*conversion{}, metaWM: map[originKey]int64{}, metaDone: map[originKey]int64{},
		lates: map[string][]state.Pending{}, floors: slices.Repeat([]floor{noFloor}, len(e.plan.Sets)),
		writes: map[string]uint64{}, emitted: map[string][]emission{}, queued: map[string]bool{}, due: newCloseHeap(),
		cache: map[string]*state.Entity{}}
	for _, src := range e.plan.Sources {
		pt.eventsIn = append(pt.eventsIn, e.m.eventsIn.WithLabelValues(src.Topic, pt.label))
	}
	if int(id) < len(e.tickKeys) {
		pt.tickKey = e.tickKeys[id]
	}
	for i, src := range e.plan.Sources {
		if !src.Repartition {
			og := pt.originOf(originKey{e.topicIDs[i], id})
			og.expected, og.lastAdvance = true, e.cfg.Now()
		}
	}
	pt.duplicates = e.m.duplicates.WithLabelValues(pt.label)
	pt.lag = e.m.streamTimeLag.WithLabelValues(pt.label)
	pt.openGauge = e.m.windowsOpen.WithLabelValues(pt.label)
	pt.heldGauge = e.m.windowsHeld.WithLabelValues(pt.label)
	pt.entities = e.m.entities.WithLabelValues(pt.label)
	pt.scheduled = e.m.scheduled.WithLabelValues(pt.label)
	pt.ticks = e.m.ticks.WithLabelValues(pt.label)
	pt.waits = e.m.waiting.WithLabelValues(pt.label)
	if err := pt.rebuild(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.parts[id] = pt
	e.mu.Unlock()
	return pt, nil
}

// rebuild reads the partition's local table: its record (idle advance, origins, layouts), its
// entities' fences (origin watermarks) and every entity's next close. Everything in the table is
// acknowledged by Kafka (it was recovered from the changelog, or kept from a clean stop), so
// closed windows are emitted again at the first close; whether their finals reached Kafka before
// is unknown, and the totals are the same.
func (pt *partition) rebuild() error {
	e := pt.e
	it, err := pt.tbl.Iterator()
	if err != nil {
		return fmt.Errorf("partition %d: iterate table: %w", pt.id, err)
	}
	defer it.Release()
	type stored struct {
		key string
		ent *state.Entity
	}
	var ents []stored
	var graces []state.SetGrace
	now := e.cfg.Now()
	for it.Next() {
		key := string(it.Key())
		v, err := it.Value()
		if err != nil {
			return fmt.Errorf("partition %d: read table: %w", pt.id, err)
		}
		if strings.HasPrefix(key, plan.TickKeyPrefix) {
			rec, err := state.DecodePartition(v)
			if err != nil {
				return fmt.Errorf("partition %d: record %q: %w", pt.id, key, err)
			}
			pt.idleST = max(pt.idleST, rec.IdleStreamTime)
			pt.st = max(pt.st, rec.StreamTime)
			pt.metaST = max(pt.metaST, rec.StreamTime)
			for _, o := range rec.Origins {
				k := originKey{o.Topic, o.Partition}
				og := pt.originOf(k)
				og.wm = max(og.wm, o.Watermark)
				og.done = max(og.done, o.Done)
				pt.metaWM[k] = max(pt.metaWM[k], o.Watermark)
				pt.metaDone[k] = max(pt.metaDone[k], o.Done)
			}
			graces = rec.Graces
			for _, l := range rec.Layouts {
				if err := pt.knowLayout(l); err != nil {
					return err
				}
				if l.Hash == e.layout.Hash {
					pt.layoutHeld = true
				}
			}
			continue
		}
		ent, err := state.Decode(append([]byte(nil), v...))
		if err != nil {
			return fmt.Errorf("partition %d: key %q: %w", pt.id, key, err)
		}
		for _, f := range ent.Fences {
			og := pt.originOf(originKey{f.Topic, f.Partition})
			og.wm = max(og.wm, f.Watermark)
		}
		pt.st = max(pt.st, ent.StreamTime)
		ents = append(ents, stored{key, ent})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("partition %d: iterate table: %w", pt.id, err)
	}
	// A partition taken over has a backlog to read before its origins can be called quiet: every
	// origin gets a full IdleTimeout from now (old ticks replayed from the loop topic must not
	// close its windows before its records are read).
	for _, og := range pt.origins {
		og.lastAdvance = now
	}
	pt.recomputeEventST()
	pt.keepFinals(graces)
	if err := pt.knowLayout(e.layout); err != nil {
		return err
	}
	// Layouts the record does not describe are described by one entity each (the describer): learn
	// them all before converting any entity that follows them.
	for _, s := range ents {
		if _, known := pt.layouts[s.ent.Layout]; known || s.ent.Layout == e.layout.Hash || s.ent.Layout == 0 {
			continue
		}
		desc, err := s.ent.Described()
		if err != nil {
			return fmt.Errorf("partition %d: entity %q: %w", pt.id, s.key, err)
		}
		if desc != nil {
			if err := pt.knowLayout(*desc); err != nil {
				return err
			}
		}
	}
	for _, s := range ents {
		if err := pt.convert(s.key, s.ent); err != nil {
			return err
		}
		pt.held += len(s.ent.Windows)
		pt.open += len(s.ent.Windows)
		pt.schedule(s.key, s.ent)
	}
	pt.entities.Set(float64(len(ents)))
	pt.windowsDelta(0, 0)
	e.log.Debug("partition rebuilt", "partition", pt.id, "entities", len(ents), "windows", pt.held, "stream_time", pt.closeST())
	return nil
}

// knowLayout adds a layout to those the partition's entities may follow, after checking that the
// current plan can read it.
func (pt *partition) knowLayout(l state.Layout) error {
	for _, known := range pt.recordLayout {
		if known.Hash == l.Hash {
			return nil
		}
	}
	if l.Hash != pt.e.layout.Hash {
		if err := checkLayout(pt.e.plan, &l); err != nil {
			return fmt.Errorf("partition %d: %w", pt.id, err)
		}
		pt.layouts[l.Hash] = newConversion(pt.e.plan, &l)
	}
	pt.recordLayout = append(pt.recordLayout, l)
	pt.metaDirty = true
	return nil
}

// convert brings an entity read from the table to the current layout.
func (pt *partition) convert(key string, ent *state.Entity) error {
	cur := pt.e.layout.Hash
	if ent.Layout == cur || ent.Layout == 0 { // version-1 state follows the plan by position
		ent.Layout = cur
		ent.Undescribe()
		return nil
	}
	c := pt.layouts[ent.Layout]
	if c == nil {
		desc, err := ent.Described()
		if err != nil {
			return fmt.Errorf("partition %d: entity %q: %w", pt.id, key, err)
		}
		if desc != nil {
			if err := pt.knowLayout(*desc); err != nil {
				return err
			}
			c = pt.layouts[ent.Layout]
		}
	}
	ent.Undescribe()
	if c == nil {
		pt.e.m.unknownLayout.Inc()
		return fmt.Errorf("partition %d: entity %q was written under topology layout %08x, which neither it nor the partition's record describes", pt.id, key, ent.Layout)
	}
	c.convert(pt.e.plan, ent, cur)
	return nil
}

// describe sets what an entity about to be written says of its layout (see state.Entity.LayoutDesc).
func (pt *partition) describe(key string, ent *state.Entity) {
	ent.Undescribe()
	ent.Layout = pt.e.layout.Hash
	if pt.layoutHeld {
		return
	}
	if pt.describer == "" {
		pt.describer = key
	}
	if key == pt.describer {
		ent.LayoutDesc = &pt.e.layout
	}
}

// load reads the callback's entity, in the current layout, as a copy the caller may change.
func (pt *partition) load(ctx goka.Context) (*state.Entity, error) {
	if c, ok := pt.cache[ctx.Key()]; ok {
		return c.Clone(), nil
	}
	v := ctx.Value()
	if v == nil {
		return nil, nil
	}
	ent, ok := v.(*state.Entity)
	if !ok {
		return nil, fmt.Errorf("table value of %q is %T, want *state.Entity", ctx.Key(), v)
	}
	if err := pt.convert(ctx.Key(), ent); err != nil {
		return nil, err
	}
	return ent, nil
}

// read reads another entity (closing it), in the current layout, not to be changed.
func (pt *partition) read(entity string) (*state.Entity, error) {
	if c, ok := pt.cache[entity]; ok {
		return c, nil
	}
	raw, err := pt.tbl.Get(entity)
	if err != nil || raw == nil {
		return nil, err
	}
	ent, err := state.Decode(raw)
	if err != nil {
		return nil, err
	}
	if err := pt.convert(entity, ent); err != nil {
		return nil, err
	}
	pt.remember(entity, ent)
	return ent, nil
}

// remember caches an entity as written or read (it must not be changed after). A full cache
// forgets an entity at random: the next read of it goes to the table.
func (pt *partition) remember(entity string, ent *state.Entity) {
	if pt.e.cacheLimit <= 0 {
		return
	}
	if _, ok := pt.cache[entity]; !ok && len(pt.cache) >= pt.e.cacheLimit {
		for k := range pt.cache {
			delete(pt.cache, k)
			break
		}
	}
	pt.cache[entity] = ent
}

// set writes an entity to the table, and remembers it. The write fences the entity's records late
// for every window since its last write: those Kafka may not hold the late records of yet go
// with it as pending, for a replay to send again (state.Entity.Pending).
func (pt *partition) set(ctx goka.Context, ent *state.Entity) {
	if ls := pt.lates[ctx.Key()]; len(ls) > 0 {
		ent.Pending = append(ent.Pending, ls...)
		delete(pt.lates, ctx.Key())
	}
	if len(ent.Pending) > 0 {
		ent.Pending = pt.unsettled(ent.Pending)
	}
	pt.describe(ctx.Key(), ent)
	ctx.SetValue(ent)
	pt.wrote(ctx.Key())
	pt.remember(ctx.Key(), ent)
}

func (pt *partition) originOf(k originKey) *origin {
	og := pt.origins[k]
	if og == nil {
		og = &origin{wm: math.MinInt64, done: -1, latest: -1}
		pt.origins[k] = og
	}
	return og
}

// keepFinals sets the sets' floors from the graces the partition's record holds: a set whose
// grace was raised since keeps final the windows that were final under the smaller grace at the
// stream time the partition had then, which is the stream time it was rebuilt to (see
// state.SetGrace). The record written next holds the floors.
func (pt *partition) keepFinals(graces []state.SetGrace) {
	for _, g := range graces {
		set := pt.e.plan.SetByName(g.Set)
		if set == nil {
			continue
		}
		f := floor{through: g.FinalThrough, at: g.FinalAt}
		if g.Grace < set.Grace && pt.st != math.MinInt64 {
			if through := pt.st - g.Grace; through > f.through {
				f = floor{through: through, at: pt.st}
			}
			pt.e.log.Info("grace raised: windows final under the old grace stay final", "partition", pt.id, "set", set.Name,
				"old_grace_ms", g.Grace, "grace_ms", set.Grace, "final_through", f.through)
		}
		pt.floors[set.Index] = f
		pt.metaDirty = true
	}
}

// replayed reports whether the record of origin k at offset is one the partition processed
// before, and everything written for it is acknowledged: it is skipped, as a duplicate.
func (pt *partition) replayed(k originKey, offset int64) bool {
	og := pt.origins[k]
	if og == nil || offset > og.done {
		return false
	}
	pt.duplicates.Inc()
	// A replay is the partition catching up, not a quiet input: it keeps the origin from being
	// called idle (closing windows in the middle of a replay would change what it applies).
	og.lastAdvance = pt.e.cfg.Now()
	return true
}

// processed records that the record of origin k at offset was processed: once Kafka acknowledged
// what has been sent until now, it is done.
func (pt *partition) processed(k originKey, offset int64) {
	og := pt.originOf(k)
	og.latest = max(og.latest, offset)
	if !og.candidate.set {
		pt.propose(og, pt.e.cfg.Durability.Acknowledged())
	}
}

// propose makes the origin's last processed offset its done candidate, or done at once when what
// was sent is acknowledged already. One candidate at a time: a record costs no more than a
// comparison while one waits.
func (pt *partition) propose(og *origin, acked uint64) {
	if og.latest <= og.done {
		return
	}
	b := pt.e.cfg.Durability.Sent()
	if b <= acked {
		og.done = og.latest
		pt.metaDirty = true
		return
	}
	og.candidate.offset, og.candidate.bound, og.candidate.set = og.latest, b, true
	pt.candidates++
}

// settleDone moves the origins' done offsets to their candidates that Kafka acknowledged, and
// forgets late records of entities not written since that are done.
func (pt *partition) settleDone(acked uint64) {
	for _, og := range pt.origins {
		if og.candidate.set && og.candidate.bound <= acked {
			og.done = max(og.done, og.candidate.offset)
			og.candidate.set = false
			pt.candidates--
			pt.metaDirty = true
			pt.propose(og, acked) // the records processed while it waited
		}
	}
	if len(pt.lates) > 4096 {
		for entity, ps := range pt.lates {
			if ps = pt.unsettled(ps); len(ps) == 0 {
				delete(pt.lates, entity)
			} else {
				pt.lates[entity] = ps
			}
		}
	}
}

// unsettled keeps the pending late records that are not done (Kafka may not hold their late
// records), each once.
func (pt *partition) unsettled(ps []state.Pending) []state.Pending {
	kept := ps[:0]
	for _, p := range ps {
		if og := pt.origins[originKey{p.Topic, p.Partition}]; og != nil && p.Offset <= og.done {
			continue
		}
		if !slices.Contains(kept, p) {
			kept = append(kept, p)
		}
	}
	return kept
}

// closesAt is the stream time at which window w of set closes: its end plus the set's grace, or
// earlier when the set's floor keeps it final.
func (pt *partition) closesAt(set *plan.Set, w windows.Window) int64 {
	c := w.ClosesAt(set.Grace)
	if f := pt.floors[set.Index]; w.End <= f.through {
		c = min(c, f.at)
	}
	return c
}

// closed reports whether window w of set is closed at stream time st.
func (pt *partition) closed(set *plan.Set, w windows.Window, st int64) bool {
	return st >= pt.closesAt(set, w)
}

// recomputeEventST sets the stream time the origins agree on: the smallest watermark of those
// that have data or are expected, and moves the partition's stream time up to it.
func (pt *partition) recomputeEventST() {
	st := int64(math.MaxInt64)
	for _, og := range pt.origins {
		if og.wm != math.MinInt64 || og.expected {
			st = min(st, og.wm)
		}
	}
	if st == math.MaxInt64 {
		st = math.MinInt64
	}
	pt.eventST = st
	pt.st = max(pt.st, st, pt.idleST)
}

// closeST is the partition's stream time: windows that close at or before it are closed.
func (pt *partition) closeST() int64 { return pt.st }

// windowClosesAt is the stream time at which window w of the state closes.
func (pt *partition) windowClosesAt(w *state.Window) int64 {
	return pt.closesAt(pt.e.plan.Sets[w.Set], w.Span())
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
	up := pt.emittedUpTo(entity)
	at, found := int64(0), false
	for i := range ent.Windows {
		if c := pt.windowClosesAt(&ent.Windows[i]); c > up && (!found || c < at) {
			at, found = c, true
		}
	}
	if found {
		pt.due.set(entity, at)
	} else {
		pt.due.remove(entity)
	}
	pt.scheduled.Set(float64(pt.due.Len()))
}

// wrote records a write of the entity (SetValue or Delete) that Kafka has yet to acknowledge.
func (pt *partition) wrote(entity string) {
	if b := pt.e.cfg.Durability.Sent(); b > pt.acked {
		pt.writes[entity] = b
	}
}

// durable reports whether every write of the entity is acknowledged.
func (pt *partition) durable(entity string) bool {
	b, ok := pt.writes[entity]
	if !ok {
		return true
	}
	if b <= pt.acked {
		delete(pt.writes, entity)
		return true
	}
	return false
}

// catchUp takes in what Kafka acknowledged since the last callback: closes that waited for an
// entity's write, an idle advance that waited for the partition's record.
func (pt *partition) catchUp(ctx goka.Context) {
	a := pt.e.cfg.Durability.Acknowledged()
	if a == pt.acked && len(pt.metaFlight) == 0 && !pt.pendingIdle.set && len(pt.waiting) == 0 && pt.candidates == 0 {
		return
	}
	pt.acked = a
	if pt.candidates > 0 || len(pt.lates) > 4096 {
		pt.settleDone(a)
	}
	for len(pt.metaFlight) > 0 && pt.metaFlight[0].bound <= a {
		for k, wm := range pt.metaFlight[0].wm {
			pt.metaWM[k] = max(pt.metaWM[k], wm)
		}
		for k, d := range pt.metaFlight[0].done {
			pt.metaDone[k] = max(pt.metaDone[k], d)
		}
		pt.metaST = max(pt.metaST, pt.metaFlight[0].st)
		pt.layoutHeld = pt.layoutHeld || pt.metaFlight[0].layout
		pt.metaFlight = pt.metaFlight[1:]
	}
	if len(pt.writes) > 1024 {
		for ent, b := range pt.writes {
			if b <= a {
				delete(pt.writes, ent)
			}
		}
	}
	closes := false
	if pt.pendingIdle.set && pt.pendingIdle.bound <= a {
		pt.idleST = max(pt.idleST, pt.pendingIdle.target)
		pt.st = max(pt.st, pt.idleST)
		pt.pendingIdle.set = false
		closes = true
	}
	if len(pt.waiting) > 0 {
		still := pt.waiting[:0]
		for _, entity := range pt.waiting {
			if !pt.durable(entity) {
				still = append(still, entity)
				continue
			}
			ent, err := pt.read(entity)
			if err != nil {
				pt.e.fail(ctx, fmt.Errorf("partition %d: state of %q: %w", pt.id, entity, err))
				return
			}
			if ent != nil {
				pt.schedule(entity, ent)
				closes = true
			}
		}
		pt.waiting = still
	}
	if closes {
		pt.closeDue(ctx)
	}
	pt.countWaits()
}

// countWaits sets the gauge of what waits for Kafka's acknowledgement.
func (pt *partition) countWaits() {
	n := len(pt.waiting)
	if pt.pendingIdle.set {
		n++
	}
	pt.waits.Set(float64(n))
}

// nudge sends the partition a message to itself while closes, an idle advance or the record
// describing the layout wait for Kafka's acknowledgement: goka calls back only for messages, and
// without one the wait could last until the next tick.
func (pt *partition) nudge(ctx goka.Context) {
	if pt.nudged || pt.tickKey == "" || (len(pt.waiting) == 0 && !pt.pendingIdle.set && pt.layoutHeld) {
		return
	}
	pt.nudged = true
	ctx.Loopback(pt.tickKey, (&loopMsg{kind: loopNudge}).encode())
}

// closeDue emits the final totals of every window that stream time has closed and whose entity
// Kafka holds as the local table does. It reads the entities' state from the local table and emits
// from whatever callback advanced stream time: no message per entity, no write.
func (pt *partition) closeDue(ctx goka.Context) {
	st := pt.closeST()
	for pt.due.Len() > 0 && pt.due.minAt() <= st {
		entity := pt.due.minEntity()
		if !pt.durable(entity) {
			pt.due.remove(entity)
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
			pt.due.remove(entity)
			continue
		}
		pt.emitClosed(ctx, entity, ent)
		pt.schedule(entity, ent) // moves its entry in place, or removes it
	}
	pt.scheduled.Set(float64(pt.due.Len()))
}

// emitClosed emits the final totals of the entity's windows closed at the partition's stream time
// and not emitted yet by this process.
func (pt *partition) emitClosed(ctx goka.Context, entity string, ent *state.Entity) {
	e := pt.e
	st := pt.closeST()
	up := pt.emittedUpTo(entity)
	n := 0
	for i := range ent.Windows {
		w := &ent.Windows[i]
		if c := pt.windowClosesAt(w); c <= up || c > st {
			continue
		}
		set := e.plan.Sets[w.Set]
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
		e.emit(ctx, entity, set, w, values, true)
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
	if len(ems) == 0 {
		return false
	}
	up := int64(math.MinInt64)
	keep := ems[:0]
	for _, em := range ems {
		if em.bound <= pt.acked {
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
	if up == math.MinInt64 {
		return false
	}
	kept := ent.Windows[:0]
	for _, w := range ent.Windows {
		if pt.windowClosesAt(&w) > up {
			kept = append(kept, w)
		}
	}
	pruned := len(ent.Windows) - len(kept)
	ent.Windows = kept
	pt.windowsDelta(0, -pruned)
	return pruned > 0
}

// covered reports whether the partition's acknowledged record holds the stream time, every
// watermark the entity carries and offsets done past its fences, so that deleting the entity
// loses nothing a restart or a replay needs.
func (pt *partition) covered(ent *state.Entity) bool {
	if pt.metaST < ent.StreamTime {
		return false
	}
	for _, f := range ent.Fences {
		k := originKey{f.Topic, f.Partition}
		wm, ok := pt.metaWM[k]
		if !ok || wm < f.Watermark {
			return false
		}
		// A replay of the entity's records after it left finds them done, instead of judging
		// them afresh (late for windows long closed).
		if d, ok := pt.metaDone[k]; !ok || d < f.Offset {
			return false
		}
	}
	return true
}

// windowsDelta adds open to the windows not yet emitted and held to the windows in the table.
func (pt *partition) windowsDelta(open, held int) {
	pt.open += open
	pt.held += held
	pt.openGauge.Set(float64(pt.open))
	pt.heldGauge.Set(float64(pt.held))
}

// closeHeap is a min-heap of entities by the close time of their next window to emit, with one
// entry per entity updated in place, so that its size follows the entities, not the events.
type closeHeap struct {
	at      []int64
	entity  []string
	indexOf map[string]int
}

func newCloseHeap() closeHeap { return closeHeap{indexOf: map[string]int{}} }

func (h *closeHeap) Len() int          { return len(h.at) }
func (h *closeHeap) minAt() int64      { return h.at[0] }
func (h *closeHeap) minEntity() string { return h.entity[0] }

func (h *closeHeap) set(entity string, at int64) {
	if i, ok := h.indexOf[entity]; ok {
		old := h.at[i]
		h.at[i] = at
		if at < old {
			h.up(i)
		} else {
			h.down(i)
		}
		return
	}
	h.at = append(h.at, at)
	h.entity = append(h.entity, entity)
	h.indexOf[entity] = len(h.at) - 1
	h.up(len(h.at) - 1)
}

func (h *closeHeap) remove(entity string) {
	i, ok := h.indexOf[entity]
	if !ok {
		return
	}
	last := len(h.at) - 1
	h.swap(i, last)
	h.at, h.entity = h.at[:last], h.entity[:last]
	delete(h.indexOf, entity)
	if i < last {
		h.down(i)
		h.up(i)
	}
}

func (h *closeHeap) swap(i, j int) {
	h.at[i], h.at[j] = h.at[j], h.at[i]
	h.entity[i], h.entity[j] = h.entity[j], h.entity[i]
	h.indexOf[h.entity[i]] = i
	h.indexOf[h.entity[j]] = j
}

func (h *closeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.at[p] <= h.at[i] {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *closeHeap) down(i int) {
	n := len(h.at)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.at[l] < h.at[m] {
			m = l
		}
		if r < n && h.at[r] < h.at[m] {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}
