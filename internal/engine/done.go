package engine

import (
	"slices"

	"github.com/abacus-stream/abacus/state"
)

// Done offsets and pending late records: what the partition knows Kafka holds of the records it
// processed, so that a replay neither sends again what is there nor skips what is not (DESIGN
// invariant 13; the package comment, Replays).

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
