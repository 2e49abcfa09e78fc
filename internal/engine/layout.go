package engine

import (
	"fmt"
	"slices"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/state"
)

// The layout of a topology is how its state refers to sets and aggregations: by position in the
// layout the entity names (state.Entity.Layout). An entity written under another layout (an
// earlier topology) is converted when it is read: its windows follow their set by name, their
// accumulators their aggregation by name; windows of a set that is gone are dropped, aggregations
// added to a set start from nothing. A set whose window changed cannot keep its state: the
// processor refuses to start on it.

// conversion maps the sets and aggregations of an earlier layout onto the current plan.
type conversion struct {
	set  []int   // old set index -> current set index, -1 when the set is gone
	aggs [][]int // old set index -> old aggregation index -> current index, -1 when gone
}

// checkLayout refuses an earlier layout in which a set of the current plan had another window,
// or an aggregation of it another kind (a count read as a sum, a sum as a max: the encodings
// agree or not, the values would be wrong). Layouts written before kinds were recorded say
// nothing of them, and only their windows are checked.
func checkLayout(p *plan.Plan, old *state.Layout) error {
	for _, os := range old.Sets {
		s := p.SetByName(os.Name)
		if s == nil {
			continue
		}
		if plan.LayoutWindow(s) != os.Window {
			return fmt.Errorf("aggregate set %q changed its window or key from %q to %q: its state cannot be kept; give the new set a new name (and drop the old set), or start a new processor group",
				os.Name, os.Window, plan.LayoutWindow(s))
		}
		for k, name := range os.Aggs {
			was := os.Kind(k)
			if was == "" {
				continue
			}
			for _, a := range s.Aggs {
				if a.Name == name && a.Kind != was {
					return fmt.Errorf("aggregation %q of set %q changed its kind from %s to %s: its state cannot be read as the new kind; give the new aggregation a new name (and drop the old one), or start a new processor group",
						name, os.Name, was, a.Kind)
				}
			}
		}
	}
	return nil
}

func newConversion(p *plan.Plan, old *state.Layout) *conversion {
	c := &conversion{set: make([]int, len(old.Sets)), aggs: make([][]int, len(old.Sets))}
	for i, os := range old.Sets {
		c.set[i] = -1
		s := p.SetByName(os.Name)
		if s == nil {
			continue
		}
		c.set[i] = int(s.Index)
		c.aggs[i] = make([]int, len(os.Aggs))
		for k, name := range os.Aggs {
			c.aggs[i][k] = -1
			for j, a := range s.Aggs {
				if a.Name == name {
					c.aggs[i][k] = j
				}
			}
		}
	}
	return c
}

// convert rewrites ent's windows from its layout to the current one. Accumulators of
// aggregations added since are left nil: accumulators() starts them afresh.
func (c *conversion) convert(p *plan.Plan, ent *state.Entity, current uint32) {
	kept := ent.Windows[:0]
	for _, w := range ent.Windows {
		if int(w.Set) >= len(c.set) || c.set[w.Set] < 0 {
			continue // a set that is gone
		}
		old := w.Set
		w.Set = uint16(c.set[old])
		aggs := make([][]byte, len(p.Sets[w.Set].Aggs))
		had := make([]bool, len(aggs))
		var absent []int
		for k, j := range c.aggs[old] {
			if j < 0 {
				continue
			}
			had[j] = true
			if k < len(w.Aggs) {
				aggs[j] = w.Aggs[k]
			}
			if w.IsAbsent(k) {
				absent = append(absent, j)
			}
		}
		for j := range aggs {
			if !had[j] {
				// Added to the set since the window opened: it has not seen the window's earlier
				// events, so the window's totals leave it out (its windows opened from now on
				// have it).
				absent = append(absent, j)
			}
		}
		slices.Sort(absent)
		w.Aggs, w.Absent = aggs, absent
		kept = append(kept, w)
	}
	ent.Windows = kept
	ent.Layout = current
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
