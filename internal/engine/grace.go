package engine

import (
	"math"
	"slices"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/windows"
)

// A set's grace may change between builds of a topology; a window that had its final keeps it
// (DESIGN invariant 14): floors keep the windows final under an earlier, smaller grace closed.

// floor keeps a set's windows final through a raise of its grace (state.SetGrace): windows that
// end at or before through closed at stream time at, whatever the grace says now.
type floor struct {
	through, at int64
}

// noFloor is the floor of a set whose grace was never raised.
var noFloor = floor{through: math.MinInt64, at: math.MinInt64}

// keepFinals sets the sets' floors from the graces the partition's record holds: a set whose
// grace was raised since keeps final the windows that were final under the smaller grace at the
// stream time the partition had then, which is the stream time it was rebuilt to (see
// state.SetGrace). The record written next holds the floors.
func (pt *partition) keepFinals(graces []state.SetGrace) {
	pt.learnLiveFrom(graces)
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

// windowClosesAt is the stream time at which window w of the state closes.
func (pt *partition) windowClosesAt(w *state.Window) int64 {
	return pt.closesAt(pt.e.plan.Sets[w.Set], w.Span())
}

// learnLiveFrom sets from when the partition runs each set: from the record, or, for a set the
// record does not know while it knows others (a set added to a running topology), from the
// stream time the partition has now. A window that started before missed the events before: it
// gets no total (its aggregations are all absent), which `abacus backfill` can compute from the
// facts. A partition with no record yet (a new group) runs every set from its start, and so does
// one whose record predates the graces.
func (pt *partition) learnLiveFrom(graces []state.SetGrace) {
	for i := range pt.liveFrom {
		pt.liveFrom[i] = minTime
	}
	if len(graces) == 0 {
		return
	}
	for _, g := range graces {
		if pt.e.plan.SetByName(g.Set) == nil {
			// A set removed: the record must say so soon, or a version that adds it back before
			// it is written would take the set for one that ran all along, its windows open
			// across the removal for whole.
			pt.recordWanted = true
		}
	}
	for _, set := range pt.e.plan.Sets {
		i := slices.IndexFunc(graces, func(g state.SetGrace) bool { return g.Set == set.Name })
		switch {
		case i >= 0:
			pt.liveFrom[set.Index] = graces[i].LiveFrom
		case pt.st != minTime:
			pt.liveFrom[set.Index] = pt.st
			pt.metaDirty, pt.recordWanted = true, true
			pt.e.log.Info("aggregate set added to a running topology: windows that started before have no total", "partition", pt.id,
				"set", set.Name, "live_from", pt.st)
		}
	}
}

// beforeLive reports whether window w of set started before the partition ran the set: it has
// missed events, and gets no total.
func (pt *partition) beforeLive(set *plan.Set, w windows.Window) bool {
	return w.Start < pt.liveFrom[set.Index]
}

// allAbsent marks every aggregation of set absent from a window.
func allAbsent(set *plan.Set) []int {
	all := make([]int, len(set.Aggs))
	for k := range all {
		all[k] = k
	}
	return all
}
