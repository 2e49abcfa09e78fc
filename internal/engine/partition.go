package engine

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/state"
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

// partition is the in-memory view of one assigned partition. Only that partition's goroutine
// touches it (goka runs one goroutine per partition for all its topics).
type partition struct {
	// early holds, per entity, when an EarlyEvery window it holds back a running total of is
	// due (wall-clock ms): the tick visits it then. In memory only: after a restart the next
	// event or the final brings the total.
	early map[string]int64

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
	metaIdleST   int64                  // idle stream time in the last acknowledged record
	candidates   int                    // origins with a done candidate
	floors       []floor                // per set of the plan
	liveFrom     []int64                // per set of the plan: see learnLiveFrom
	// layoutHeld says the acknowledged record describes the current layout. Until it does, one
	// entity, the describer, carries the layout's description at each of its writes, so that
	// whatever part of the partition's writes Kafka holds after a crash, a restart under another
	// topology can read it: the describer's first write comes before every other entity's under
	// this layout, and a partition's writes land in order.
	layoutHeld bool
	describer  string

	resumeGen uint64 // Engine.resumeGen when the partition last took its resume offsets

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
	// recordWanted asks the next nudge to write the partition's record (a rollup's progress
	// waits for it).
	recordWanted bool

	ru rollupView // rollups: partials as a source partition, merges as an owner

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

type metaWrite struct {
	bound    uint64
	st       int64
	wm       map[originKey]int64
	done     map[originKey]int64
	layout   bool             // the record describes the current layout
	rollDone map[uint16]int64 // the owner's ends up to which it has every partial, per rollup set
	idle     int64            // the idle stream time it holds
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
	pt = &partition{early: map[string]int64{}, e: e, id: id, label: strconv.Itoa(int(id)), tbl: st, eventST: math.MinInt64, idleST: math.MinInt64, st: math.MinInt64, metaST: math.MinInt64, metaIdleST: math.MinInt64,
		origins: map[originKey]*origin{}, layouts: map[uint32]*conversion{}, metaWM: map[originKey]int64{}, metaDone: map[originKey]int64{},
		lates: map[string][]state.Pending{}, floors: slices.Repeat([]floor{noFloor}, len(e.plan.Sets)), liveFrom: slices.Repeat([]int64{minTime}, len(e.plan.Sets)),
		writes: map[string]uint64{}, emitted: map[string][]emission{}, queued: map[string]bool{}, due: newCloseHeap(),
		cache: map[string]*state.Entity{}, ru: newRollupView(e.plan, len(e.tickKeys))}
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
	if pt.e.rollups {
		pt.ru.wroteST(ent.StreamTime, pt.e.cfg.Durability.Sent(), pt.acked)
	}
}

func (pt *partition) originOf(k originKey) *origin {
	og := pt.origins[k]
	if og == nil {
		og = &origin{wm: math.MinInt64, done: -1, latest: -1}
		pt.origins[k] = og
	}
	return og
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

// wrote records a write of the entity (SetValue or Delete) that Kafka has yet to acknowledge.
func (pt *partition) wrote(entity string) {
	if b := pt.e.cfg.Durability.Sent(); b > pt.acked {
		pt.writes[entity] = b
	}
}

// closable reports whether the entity's windows due to close can be emitted: the entity's
// every write is acknowledged, or, for a rollup key's owner, which partials rewrite all the time
// (a global key's at every partial of every window), the writes that changed its windows due.
func (pt *partition) closable(entity string) bool {
	if isOwnerKey(entity) {
		return pt.ownerDurable(entity)
	}
	return pt.durable(entity)
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
	if a == pt.acked && len(pt.metaFlight) == 0 && !pt.pendingIdle.set && len(pt.waiting) == 0 && pt.candidates == 0 && len(pt.ru.inflight) == 0 && len(pt.ru.stFlight) == 0 {
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
		pt.metaIdleST = max(pt.metaIdleST, pt.metaFlight[0].idle)
		for set, d := range pt.metaFlight[0].rollDone {
			pt.ru.metaDone[set] = max(pt.ru.metaDone[set], d)
		}
		if !pt.layoutHeld && pt.metaFlight[0].layout {
			pt.layoutHeld = true
			pt.e.log.Debug("partition record describing the topology layout acknowledged", "partition", pt.id)
		}
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
			if !pt.closable(entity) {
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
	if pt.e.rollups {
		pt.settleRollups(ctx)
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
	// With rollups, the partition also waits for its final partials, and for the writes that
	// carry its stream time past their windows, to be acknowledged: its progress, which the
	// owners close their windows by, moves only then.
	rollupWait := pt.e.rollups && (len(pt.ru.inflight) > 0 || (len(pt.ru.stFlight) > 0 && pt.ru.sentT < pt.ru.doneClose-1))
	if pt.nudged || pt.tickKey == "" || (len(pt.waiting) == 0 && !pt.pendingIdle.set && pt.layoutHeld && !pt.recordWanted && !rollupWait) {
		return
	}
	pt.nudged = true
	ctx.Loopback(pt.tickKey, (&loopMsg{kind: loopNudge}).encode())
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
