package engine

import (
	"slices"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
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
