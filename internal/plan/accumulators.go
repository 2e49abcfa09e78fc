package plan

import (
	"fmt"

	"github.com/abacus-stream/abacus/state"
)

// DecodeAccs decodes a window's accumulators, one per aggregation of the set, in order; an
// aggregation the window has none of (added to the set since the window opened) starts empty.
func (s *Set) DecodeAccs(aggs [][]byte) ([]Accumulator, error) {
	accs := make([]Accumulator, len(s.Aggs))
	for k, ad := range s.Aggs {
		if k >= len(aggs) || aggs[k] == nil {
			accs[k] = ad.New()
			continue
		}
		a, err := ad.Decode(aggs[k])
		if err != nil {
			return nil, fmt.Errorf("aggregation %q: %w", ad.Name, err)
		}
		accs[k] = a
	}
	return accs, nil
}

// OwnerTotal is the running total of the merged window mi in a rollup key's owner state: the
// merge of the final partials it holds and of the early partials of the source partitions not
// final yet, with the sum of their revisions. The engine emits it; the test driver and live views
// show it.
func (s *Set) OwnerTotal(ent *state.Entity, mi int) ([]Accumulator, uint64, error) {
	merged := &ent.Windows[mi]
	accs, err := s.DecodeAccs(merged.Aggs)
	if err != nil {
		return nil, 0, err
	}
	rev := merged.Revision
	for i := range ent.Windows {
		w := &ent.Windows[i]
		if i == mi || w.Set != s.Index || w.Start != merged.Start || w.Key == "" || w.Final || w.Aggs == nil {
			continue
		}
		part, err := s.DecodeAccs(w.Aggs)
		if err != nil {
			return nil, 0, err
		}
		for k := range accs {
			if err := accs[k].Merge(part[k]); err != nil {
				return nil, 0, fmt.Errorf("merge %q: %w", s.Aggs[k].Name, err)
			}
		}
		rev += w.Revision
	}
	return accs, rev, nil
}
