package engine

import (
	"container/heap"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/abacus-stream/abacus/state"
)

// partition is the in-memory view of one assigned partition. Only that partition's goroutine
// touches it (goka runs one goroutine per partition for all its topics).
type partition struct {
	e          *Engine
	id         int32
	label      string
	st         storage.Storage // the partition's local table, read to emit other entities' finals
	streamTime int64
	lastInput  time.Time
	windows    int              // windows whose final total this process has not emitted
	held       int              // windows in the table
	due        dueHeap          // entities by the close time of their next window to emit
	next       map[string]int64 // entity -> its live entry in due
	// emitted remembers, per entity, the final emissions this process made and has not pruned:
	// windows closing at or before upTo were emitted at wall time at.
	emitted map[string][]emission
	prunes  []retainedEntry // entities with emitted windows, by when they may be pruned

	// The partition's metric series, looked up once: a label lookup per event costs.
	eventsIn   []prometheus.Counter // per source
	duplicates prometheus.Counter
	lag, open  prometheus.Gauge
	heldGauge  prometheus.Gauge
}

type emission struct {
	upTo int64
	at   time.Time
}

type retainedEntry struct {
	at     time.Time
	entity string
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
	pt = &partition{e: e, id: id, label: strconv.Itoa(int(id)), st: st, streamTime: math.MinInt64, lastInput: e.cfg.Now(),
		next: map[string]int64{}, emitted: map[string][]emission{}}
	for _, src := range e.plan.Sources {
		pt.eventsIn = append(pt.eventsIn, e.m.eventsIn.WithLabelValues(src.Topic, pt.label))
	}
	pt.duplicates = e.m.duplicates.WithLabelValues(pt.label)
	pt.lag = e.m.streamTimeLag.WithLabelValues(pt.label)
	pt.open = e.m.windowsOpen.WithLabelValues(pt.label)
	pt.heldGauge = e.m.windowsHeld.WithLabelValues(pt.label)
	if err := pt.rebuild(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.parts[id] = pt
	e.mu.Unlock()
	return pt, nil
}

// rebuild reads the partition's local table: its stream time and every entity's next close.
func (pt *partition) rebuild() error {
	it, err := pt.st.Iterator()
	if err != nil {
		return fmt.Errorf("partition %d: iterate table: %w", pt.id, err)
	}
	defer it.Release()
	n := 0
	for it.Next() {
		v, err := it.Value()
		if err != nil {
			return fmt.Errorf("partition %d: read table: %w", pt.id, err)
		}
		ent, err := state.Decode(v)
		if err != nil {
			return fmt.Errorf("partition %d: key %q: %w", pt.id, it.Key(), err)
		}
		pt.streamTime = max(pt.streamTime, ent.StreamTime)
		// Whether a closed window's final total reached Kafka before the restart is unknown:
		// every window in the table counts as not emitted, and closed ones are emitted again.
		pt.windows += len(ent.Windows)
		pt.held += len(ent.Windows)
		pt.schedule(string(it.Key()), ent)
		n++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("partition %d: iterate table: %w", pt.id, err)
	}
	pt.open.Set(float64(pt.windows))
	pt.heldGauge.Set(float64(pt.held))
	pt.e.log.Debug("partition rebuilt", "partition", pt.id, "entities", n, "windows", pt.windows, "stream_time", pt.streamTime)
	return nil
}

// closesAt is the stream time at which window w closes.
func (pt *partition) closesAt(w *state.Window) int64 {
	return w.Span().ClosesAt(pt.e.plan.Sets[w.Set].Grace)
}

// emittedUpTo is the stream time up to which this process emitted the entity's closed windows.
func (pt *partition) emittedUpTo(entity string) int64 {
	up := int64(math.MinInt64)
	for _, em := range pt.emitted[entity] {
		up = max(up, em.upTo)
	}
	return up
}

// schedule records in the heap when the entity's next window still to emit closes.
func (pt *partition) schedule(entity string, ent *state.Entity) {
	up := pt.emittedUpTo(entity)
	at, found := int64(0), false
	for i := range ent.Windows {
		if c := pt.closesAt(&ent.Windows[i]); c > up && (!found || c < at) {
			at, found = c, true
		}
	}
	if !found {
		delete(pt.next, entity)
		return
	}
	if cur, ok := pt.next[entity]; ok && cur == at {
		return
	}
	pt.next[entity] = at
	heap.Push(&pt.due, dueEntry{at: at, entity: entity})
}

// closeDue emits the final totals of every window that stream time has closed. It reads the
// entities' state from the local table and emits from whatever callback advanced stream time: no
// message per entity, no write. The windows stay in the table, closed, until pruned (see prune),
// so that after a crash the rebuilt partition finds them and emits them again.
func (pt *partition) closeDue(ctx goka.Context) {
	for pt.due.Len() > 0 && pt.due[0].at <= pt.streamTime {
		d := heap.Pop(&pt.due).(dueEntry)
		if cur, ok := pt.next[d.entity]; !ok || cur != d.at {
			continue // superseded entry
		}
		delete(pt.next, d.entity)
		raw, err := pt.st.Get(d.entity)
		if err != nil {
			pt.e.fail(ctx, fmt.Errorf("partition %d: read state of %q: %w", pt.id, d.entity, err))
			return
		}
		if raw == nil {
			continue
		}
		ent, err := state.Decode(raw)
		if err != nil {
			pt.e.fail(ctx, fmt.Errorf("partition %d: state of %q: %w", pt.id, d.entity, err))
			return
		}
		if err := pt.emitClosed(ctx, d.entity, ent); err != nil {
			pt.e.fail(ctx, err)
			return
		}
		pt.schedule(d.entity, ent)
	}
}

// emitClosed emits the final totals of the entity's windows closed at the partition's stream time
// and not emitted yet by this process.
func (pt *partition) emitClosed(ctx goka.Context, entity string, ent *state.Entity) error {
	up := pt.emittedUpTo(entity)
	n := 0
	for i := range ent.Windows {
		w := &ent.Windows[i]
		if c := pt.closesAt(w); c <= up || c > pt.streamTime {
			continue
		}
		set := pt.e.plan.Sets[w.Set]
		accs, err := accumulators(set, ent, i)
		if err != nil {
			return fmt.Errorf("close %q of %q window %d: %w", set.Name, entity, w.Start, err)
		}
		pt.e.emit(ctx, entity, set, w, accs, true)
		n++
	}
	if n > 0 {
		now := pt.e.cfg.Now()
		pt.emitted[entity] = append(pt.emitted[entity], emission{upTo: pt.streamTime, at: now})
		pt.prunes = append(pt.prunes, retainedEntry{at: now.Add(pt.e.cfg.FinalRetention), entity: entity})
		pt.windowsDelta(-n, 0)
	}
	return nil
}

// prune drops from ent the windows whose final total this process emitted at least
// FinalRetention ago, and reports whether it dropped any. Younger ones stay: goka writes the table
// before Kafka acknowledges the emitted total, and a crash in between must leave the window for
// the rebuilt partition to emit again.
func (pt *partition) prune(entity string, ent *state.Entity, now time.Time) bool {
	ems := pt.emitted[entity]
	up := int64(math.MinInt64)
	keep := ems[:0]
	for _, em := range ems {
		if now.Sub(em.at) >= pt.e.cfg.FinalRetention {
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
		if pt.closesAt(&w) > up {
			kept = append(kept, w)
		}
	}
	pruned := len(ent.Windows) - len(kept)
	ent.Windows = kept
	pt.windowsDelta(0, -pruned)
	return pruned > 0
}

// windowsDelta adds open to the windows not yet emitted and held to the windows in the table.
func (pt *partition) windowsDelta(open, held int) {
	if open != 0 {
		pt.windows += open
		pt.open.Set(float64(pt.windows))
	}
	if held != 0 {
		pt.held += held
		pt.heldGauge.Set(float64(pt.held))
	}
}

type dueEntry struct {
	at     int64
	entity string
}

// dueHeap is a min-heap of entity close times.
type dueHeap []dueEntry

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
