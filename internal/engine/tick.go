package engine

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/lovoo/goka"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/state"
)

// TickKeys finds, for each of npar partitions, a key that goka's partitioner sends to that
// partition, so that a tick sent with each key reaches every partition. The partition keeps its
// own record in the table under that key.
func TickKeys(npar int) []string {
	keys := make([]string, npar)
	found := 0
	for n := 0; found < npar; n++ {
		k := plan.TickKeyPrefix + strconv.Itoa(n)
		if part := partitioner.Partition([]byte(k), int32(npar)); keys[part] == "" {
			keys[part] = k
			found++
		}
	}
	return keys
}

// IsTickKey reports whether a loop message key is a tick's.
func IsTickKey(k string) bool {
	return len(k) > len(plan.TickKeyPrefix) && k[:len(plan.TickKeyPrefix)] == plan.TickKeyPrefix
}

// TickMessage is the loop message of a tick.
func TickMessage() []byte { return (&loopMsg{kind: loopTick}).encode() }

// onTick moves an idle partition's stream time on (in two steps: written, then applied once
// acknowledged), writes the partition's record when it changed, and sends close messages to
// entities whose closed windows wait to be dropped.
func (pt *partition) onTick(ctx goka.Context) {
	e := pt.e
	now := e.cfg.Now()
	pt.ticks.Inc()
	// Windows already closed by the stream time are emitted first: after a restart (or a
	// rebalance) the rebuilt schedule holds every entity at its first window not emitted by this
	// process, which a final emitted before the restart may have closed long ago; until those are
	// emitted again and the schedule moves on, no close waits beyond stream time, and the idle
	// advance would find nothing to advance to.
	pt.closeDue(ctx)
	if target, ok := pt.idleTarget(now); ok {
		pt.pendingIdle.target, pt.pendingIdle.set = target, true
		pt.metaDirty = true
		e.log.Debug("idle partition will advance stream time", "partition", pt.id, "from", pt.closeST(), "to", target)
	}
	if pt.metaDirty {
		pt.writeRecord(ctx)
	}
	pt.catchUp(ctx) // an in-memory store acknowledges at once
	pt.visitDueEarly(ctx, now)
	if e.rollups {
		pt.sendDueEarly(ctx, now)
		pt.pruneContributions(ctx, now)
		// Sent again at every tick, moved or not: a partition that restarted learns every other's
		// progress within a tick, whatever its record held.
		pt.ru.sentT = minTime
		pt.sendProgress(ctx)
	}
	pt.countWaits()
	pt.nudge(ctx)
	if st := pt.closeST(); st != minTime {
		pt.lag.Set(float64(now.UnixMilli()-st) / 1000)
	}
	// Entities whose final totals are acknowledged and that no write has pruned since get a
	// close message, which prunes them (and deletes those left empty).
	n := 0
	var later []retainedEntry
	for n < len(pt.prunes) && !pt.prunes[n].at.After(now) {
		r := pt.prunes[n]
		n++
		durable, pending := false, false
		for _, em := range pt.emitted[r.entity] {
			if em.bound <= pt.acked {
				durable = true
			} else {
				pending = true
			}
		}
		if durable {
			ctx.Loopback(r.entity, (&loopMsg{kind: loopClose}).encode())
		}
		if pending {
			later = append(later, r) // a final total not acknowledged yet: the next tick
		} else {
			delete(pt.queued, r.entity)
		}
	}
	pt.prunes = append(pt.prunes[n:], later...)
	if len(pt.empties) > 0 {
		for _, ent := range pt.empties {
			ctx.Loopback(ent, (&loopMsg{kind: loopClose}).encode())
		}
		pt.empties = pt.empties[:0]
	}
}

// idleTarget is where idle origins let the partition's stream time go: past the origins quiet
// for IdleTimeout, to the smallest watermark of the others; or, when every origin is quiet, with
// the wall clock, never beyond the last close the partition waits for.
func (pt *partition) idleTarget(now time.Time) (int64, bool) {
	nothingDue := pt.due.Len() == 0 && len(pt.waiting) == 0
	if nothingDue && !pt.e.rollups {
		return 0, false // nothing waits to close
	}
	cutoff := now.Add(-pt.e.cfg.IdleTimeout)
	active := int64(math.MaxInt64)
	quiet := false
	for _, og := range pt.origins {
		if og.wm == minTime && !og.expected {
			continue
		}
		if og.lastAdvance.After(cutoff) {
			active = min(active, og.wm)
		} else {
			quiet = true
		}
	}
	var target int64
	switch {
	case !quiet:
		return 0, false
	case active == minTime:
		return 0, false // an input that is not quiet has no data yet
	case active != math.MaxInt64:
		target = active
	default:
		last := int64(minTime)
		// The last window any entity holds open, not only the next ones: an entity's windows
		// (hopping, or several sets) all close in one advance, not one per tick.
		for _, at := range pt.due.last {
			last = max(last, at)
		}
		if nothingDue {
			// With rollups, a quiet partition with nothing to close still moves on: the owners of
			// rollup keys wait for its progress to close their windows. It follows the partition
			// furthest on (whose progress it knows as an owner), not the clock, so that a
			// backfill of old data is not judged late.
			last = minTime
			for _, t := range pt.ru.progress {
				last = max(last, t)
			}
			if last == minTime {
				return 0, false
			}
		}
		target = min(now.UnixMilli(), last)
	}
	if target <= pt.closeST() || (pt.pendingIdle.set && target <= pt.pendingIdle.target) {
		return 0, false
	}
	return target, true
}

// writeRecord writes the partition's record; the callback's key must be the partition's own.
func (pt *partition) writeRecord(ctx goka.Context) {
	rec, wms, done := pt.record()
	ctx.SetValue(rec)
	bound := pt.e.cfg.Durability.Sent()
	pt.metaFlight = append(pt.metaFlight, metaWrite{bound: bound, st: rec.StreamTime, wm: wms, done: done, layout: true, rollDone: maps.Clone(pt.ru.done), idle: rec.IdleStreamTime})
	pt.recordWanted = false
	if pt.pendingIdle.set {
		pt.pendingIdle.bound = bound
	}
	pt.metaDirty = false
}

// record is the partition's record as it should be in the table, and the origin watermarks and
// done offsets it holds.
func (pt *partition) record() (*state.Partition, map[originKey]int64, map[originKey]int64) {
	rec := &state.Partition{StreamTime: pt.st, IdleStreamTime: pt.idleST, Layouts: slices.Clone(pt.recordLayout)}
	for _, set := range pt.e.plan.Sets {
		if es := pt.ru.ends[set.Index]; es != nil {
			rec.RollupEnds = append(rec.RollupEnds, state.SetEnds{Set: set.Name, Ends: slices.Clone(es), Live: slices.Clone(pt.ru.live[set.Index])})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(pt.ru.foreign)) {
		live := pt.ru.foreign[name]
		rec.RollupEnds = append(rec.RollupEnds, state.SetEnds{Set: name, Ends: slices.Repeat([]int64{minTime}, len(live)), Live: slices.Clone(live)})
	}
	if pt.e.rollups {
		rec.Progress = slices.Clone(pt.ru.progress)
	}
	if pt.pendingIdle.set {
		rec.IdleStreamTime = max(rec.IdleStreamTime, pt.pendingIdle.target)
	}
	for i, set := range pt.e.plan.Sets {
		f := pt.floors[i]
		rec.Graces = append(rec.Graces, state.SetGrace{Set: set.Name, Grace: set.Grace, FinalThrough: f.through, FinalAt: f.at, LiveFrom: pt.liveFrom[i]})
	}
	wms := make(map[originKey]int64, len(pt.origins))
	done := make(map[originKey]int64, len(pt.origins))
	for k, og := range pt.origins {
		if og.wm == minTime && og.done < 0 {
			continue
		}
		rec.Origins = append(rec.Origins, state.Origin{Topic: k.topic, Partition: k.partition, Watermark: og.wm,
			LastAdvance: og.lastAdvance.UnixMilli(), Done: og.done})
		wms[k] = og.wm
		done[k] = og.done
	}
	slices.SortFunc(rec.Origins, func(a, b state.Origin) int {
		if a.Topic != b.Topic {
			return int(int64(a.Topic) - int64(b.Topic))
		}
		return int(a.Partition - b.Partition)
	})
	return rec, wms, done
}

// onClose handles a close message: the entity's closed windows whose final totals Kafka
// acknowledged are dropped, and an entity left with nothing leaves the table once the partition's
// record holds its fences' watermarks.
func (pt *partition) onClose(ctx goka.Context) {
	if !IsTickKey(ctx.Key()) {
		pt.closeEntity(ctx)
	}
}

func (pt *partition) closeEntity(ctx goka.Context) {
	ent, err := pt.load(ctx)
	if err != nil {
		pt.e.fail(ctx, err)
		return
	}
	if ent == nil {
		return
	}
	fired := pt.fireEarly(ctx, ctx.Key(), ent, pt.e.cfg.Now())
	changed := pt.prune(ctx.Key(), ent) || fired
	if len(ent.Windows) == 0 {
		if pt.covered(ent) {
			ctx.Delete()
			pt.wrote(ctx.Key())
			delete(pt.cache, ctx.Key())
			delete(pt.emitted, ctx.Key())
			pt.due.remove(ctx.Key())
			pt.entities.Dec()
			return
		}
		pt.empties = append(pt.empties, ctx.Key())
		pt.metaDirty = true
	}
	if changed {
		ent.StreamTime = max(ent.StreamTime, pt.closeST())
		pt.set(ctx, ent)
	}
	if isOwnerKey(ctx.Key()) && len(pt.emitted[ctx.Key()]) > 0 && !pt.queued[ctx.Key()] {
		// Emitted windows wait for the record to hold the progress that closed them: look again.
		pt.queued[ctx.Key()] = true
		pt.prunes = append(pt.prunes, retainedEntry{at: pt.e.cfg.Now().Add(pt.e.cfg.FinalRetention), entity: ctx.Key()})
	}
	pt.schedule(ctx.Key(), ent)
}
