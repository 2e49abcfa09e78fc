package plan

import (
	"fmt"
	"slices"

	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/totals"
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

// WindowAccs decodes a window's accumulators (DecodeAccs); an aggregation absent from the window
// (state.Window.Absent) starts empty, whatever bytes it holds (an encoding read back from the table
// has an empty slice where a fresh one had none).
func (s *Set) WindowAccs(w *state.Window) ([]Accumulator, error) {
	if len(w.Absent) == 0 {
		return s.DecodeAccs(w.Aggs)
	}
	aggs := slices.Clone(w.Aggs)
	for _, k := range w.Absent {
		if k < len(aggs) {
			aggs[k] = nil
		}
	}
	return s.DecodeAccs(aggs)
}

// OwnerTotal is the running total of the merged window mi in a rollup key's owner state: the
// merge of the final partials it holds and of the early partials of the source partitions not
// final yet, with the sum of their revisions and the aggregations absent from any of them
// (state.Window.Absent). The engine emits it; the test driver and live views show it.
func (s *Set) OwnerTotal(ent *state.Entity, mi int) (accs []Accumulator, rev uint64, absent []int, err error) {
	merged := &ent.Windows[mi]
	if accs, err = s.WindowAccs(merged); err != nil {
		return nil, 0, nil, err
	}
	rev, absent = merged.Revision, merged.Absent
	for i := range ent.Windows {
		w := &ent.Windows[i]
		if i == mi || w.Set != s.Index || w.Start != merged.Start || w.Key == "" || w.Final || w.Aggs == nil {
			continue
		}
		part, err := s.WindowAccs(w)
		if err != nil {
			return nil, 0, nil, err
		}
		for k := range accs {
			if err := accs[k].Merge(part[k]); err != nil {
				return nil, 0, nil, fmt.Errorf("merge %q: %w", s.Aggs[k].Name, err)
			}
		}
		rev += w.Revision
		absent = UnionAbsent(absent, w.Absent)
	}
	return accs, rev, absent, nil
}

// Values are a window's totals from its accumulators, named, in the set's order, without the
// aggregations absent from the window (state.Window.Absent): one added to the set while the
// window was open has not seen all its events, and no value is better than a wrong one.
func (s *Set) Values(accs []Accumulator, absent []int) []totals.Value {
	vs := make([]totals.Value, 0, len(accs))
	for k, a := range accs {
		if slices.Contains(absent, k) {
			continue
		}
		v := a.Value()
		v.Name = s.Aggs[k].Name
		vs = append(vs, v)
	}
	return vs
}

// UnionAbsent is the aggregations absent from either of two windows merged into one, sorted.
func UnionAbsent(a, b []int) []int {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	u := slices.Concat(a, b)
	slices.Sort(u)
	return slices.Compact(u)
}
