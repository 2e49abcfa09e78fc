package abacustest

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/partitioner"
	"github.com/abacus-stream/abacus/state"
	"github.com/abacus-stream/abacus/totals"
)

// Message is a message the processor emitted.
type Message struct {
	Topic   string
	Key     string
	Value   []byte
	Headers []deadletter.Header
	// Partition and Offset place a message to the loop topic (re-keyed events, closes, rollup
	// partial totals and progress) in the driver's log of it: Redeliver(loop topic, Partition,
	// Offset) replays the processor's input from that message on. Zero for other topics.
	Partition int32
	Offset    int64
}

// Messages are every message the processor emitted to topic, in order.
func (d *Driver) Messages(topic string) []Message {
	var out []Message
	for _, m := range d.out {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// Total is a window total the processor emitted.
type Total struct {
	Set      string
	Entity   string
	Start    time.Time
	End      time.Time
	Final    bool
	Revision uint64
	Values   map[string]totals.Value
}

// Totals are every window total emitted, in order: early and every-update firings and finals.
func (d *Driver) Totals() []Total {
	d.t.Helper()
	d.decodeTotals()
	return slices.Clone(d.totals)
}

// decodeTotals decodes the totals emitted since the last call: a test that asks after every
// record must not decode the whole output each time.
func (d *Driver) decodeTotals() {
	d.t.Helper()
	// Grown once for what is pending: appending hundreds of thousands of totals one by one copied
	// them again at every doubling, a third of the allocations of BenchmarkDriver100k.
	d.totals = slices.Grow(d.totals, len(d.out)-d.totalsAt)
	first := len(d.totals)
	for ; d.totalsAt < len(d.out); d.totalsAt++ {
		m := d.out[d.totalsAt]
		if m.Topic != d.plan.TotalsTopic {
			continue
		}
		r, err := totals.Decode(m.Value)
		if err != nil {
			d.t.Fatalf("abacustest: totals record: %v", err)
		}
		t := Total{Set: r.Set, Entity: r.Entity, Start: time.UnixMilli(r.Start), End: time.UnixMilli(r.End),
			Final: r.Final, Revision: r.Revision, Values: make(map[string]totals.Value, len(r.Values))}
		for _, v := range r.Values {
			t.Values[v.Name] = v
		}
		d.totals = append(d.totals, t)
	}
	// The finals are taken from the new totals in one pass, with their count known.
	nf := 0
	for _, t := range d.totals[first:] {
		if t.Final {
			nf++
		}
	}
	d.finals = slices.Grow(d.finals, nf)
	for _, t := range d.totals[first:] {
		if t.Final {
			d.finals = append(d.finals, t)
		}
	}
}

// Finals are the final totals emitted, in order.
func (d *Driver) Finals() []Total {
	d.t.Helper()
	d.decodeTotals()
	return slices.Clone(d.finals)
}

// FinalsOf are the final totals of one entity in one set, by window start.
func (d *Driver) FinalsOf(set, entity string) []Total {
	var out []Total
	for _, t := range d.Finals() {
		if t.Set == set && t.Entity == entity {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, func(a, b Total) int { return a.Start.Compare(b.Start) })
	return out
}

// Agrees reports whether two totals of one window agree: every aggregation both carry has the same
// value. A final emitted again after a restart under a version of the topology that removed an
// aggregation lacks it (the sinks then write the same cells again, and no other); one that
// disagrees with the first is a second final.
func (t Total) Agrees(o Total) bool {
	for name, v := range t.Values {
		if w, ok := o.Values[name]; ok && !reflect.DeepEqual(v, w) {
			return false
		}
	}
	return t.Set == o.Set && t.Entity == o.Entity && t.Start.Equal(o.Start) && t.End.Equal(o.End)
}

// Final is the final total of one window; it fails the test if there is none, or if two that
// disagree were emitted (a window has one final total, whatever happens; see Agrees).
func (d *Driver) Final(set, entity string, start time.Time) Total {
	d.t.Helper()
	var found []Total
	for _, t := range d.FinalsOf(set, entity) {
		if t.Start.Equal(start) {
			found = append(found, t)
		}
	}
	if len(found) == 0 {
		var starts []string
		for _, t := range d.FinalsOf(set, entity) {
			starts = append(starts, t.Start.UTC().Format(time.RFC3339Nano))
		}
		d.t.Fatalf("abacustest: no final total of %s/%s for the window at %s (finals at %v)", set, entity, start.UTC().Format(time.RFC3339Nano), starts)
	}
	for _, t := range found[1:] {
		if !t.Agrees(found[0]) {
			d.t.Fatalf("abacustest: two different finals of %s/%s at %s:\n  %s\n  %s", set, entity, start.UTC().Format(time.RFC3339Nano), found[0], t)
		}
	}
	return found[0]
}

// Float is a value as a number (totals.Value.Number: ints and floats as they are, quantiles the
// one nearest the median, bytes NaN), 0 when the total has no such value.
func (t Total) Float(name string) float64 {
	v, ok := t.Values[name]
	if !ok {
		return 0
	}
	return v.Number()
}

// String shows the total in one line.
func (t Total) String() string {
	names := make([]string, 0, len(t.Values))
	for n := range t.Values {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s [%s, %s) final=%v rev=%d", t.Set, t.Entity, t.Start.UTC().Format(time.RFC3339Nano), t.End.UTC().Format(time.RFC3339Nano), t.Final, t.Revision)
	for _, n := range names {
		v := t.Values[n]
		switch v.Kind {
		case totals.KindInt:
			fmt.Fprintf(&b, " %s=%d", n, v.Int)
		case totals.KindFloat:
			fmt.Fprintf(&b, " %s=%g", n, v.Float)
		case totals.KindQuantiles:
			fmt.Fprintf(&b, " %s=%v", n, v.Quantiles)
		default:
			fmt.Fprintf(&b, " %s=%x", n, v.Bytes)
		}
	}
	return b.String()
}

// Expect fails the test unless every named value is as wanted (ints and floats as numbers),
// saying which differ.
func (t Total) Expect(tb testing.TB, want map[string]float64) {
	tb.Helper()
	var diffs []string
	for name, w := range want {
		if _, ok := t.Values[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want %g)", name, w))
			continue
		}
		if got := t.Float(name); got != w {
			diffs = append(diffs, fmt.Sprintf("%s = %g, want %g", name, got, w))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		tb.Fatalf("%s:\n  %s", t, strings.Join(diffs, "\n  "))
	}
}

// DeadLetters are the dead-letter records emitted, in order.
func (d *Driver) DeadLetters() []deadletter.Record { return d.setAside(d.plan.DeadLetter) }

// Late are the late records emitted, in order (none when the topology has no late topic).
func (d *Driver) Late() []deadletter.Record {
	if d.plan.LateTopic == "" {
		return nil
	}
	return d.setAside(d.plan.LateTopic)
}

func (d *Driver) setAside(topic string) []deadletter.Record {
	d.t.Helper()
	var out []deadletter.Record
	for _, m := range d.Messages(topic) {
		r, err := deadletter.Parse(m.Value, m.Headers)
		if err != nil {
			d.t.Fatalf("abacustest: record of %s: %v", topic, err)
		}
		out = append(out, r)
	}
	return out
}

// Window is an entity's window as the processor holds it.
type Window struct {
	Start, End time.Time
	Revision   uint64
	Values     map[string]totals.Value
}

// Windows are the windows of an entity in a set that the processor holds (open ones, and closed
// ones not dropped yet), by start. For a rollup set (By, Global), entity is a key of the rollup
// and the windows are what its owner holds: the merge of the partial totals the source
// partitions sent so far (the final ones, and the early ones of an EarlyEvery set).
func (d *Driver) Windows(set, entity string) []Window {
	d.t.Helper()
	s := d.plan.SetByName(set)
	if s == nil {
		d.t.Fatalf("abacustest: topology %s has no aggregate set %q (it has %v)", d.plan.Name, set, d.topo.SetNames())
	}
	key := entity
	if s.Rollup != nil {
		key = plan.RollupStateKey(set, entity)
	}
	p := partitioner.Partition([]byte(key), int32(d.opts.Partitions))
	b, _ := d.tables[p].Get(key)
	if b == nil {
		return nil
	}
	ent, err := state.Decode(b)
	if err != nil {
		d.t.Fatalf("abacustest: state of %q: %v", key, err)
	}
	var out []Window
	for i, w := range ent.Windows {
		if w.Set != s.Index || w.Key != "" {
			continue // another set's, or a contribution to a rollup, or an owner's slot
		}
		accs, err := s.WindowAccs(&w)
		rev, absent := w.Revision, w.Absent
		if err == nil && s.Rollup != nil {
			accs, rev, absent, err = s.OwnerTotal(ent, i)
		}
		if err != nil {
			d.t.Fatalf("abacustest: %s window of %q: %v", set, entity, err)
		}
		win := Window{Start: time.UnixMilli(w.Start), End: time.UnixMilli(w.End), Revision: rev, Values: map[string]totals.Value{}}
		for _, v := range s.Values(accs, absent) {
			win.Values[v.Name] = v
		}
		out = append(out, win)
	}
	slices.SortFunc(out, func(a, b Window) int { return a.Start.Compare(b.Start) })
	return out
}

// Entities is the number of entities in the processor's tables.
func (d *Driver) Entities() int {
	n := 0
	for _, st := range d.tables {
		for k := range st.Keys() {
			if !plan.ReservedKey(k) {
				n++
			}
		}
	}
	return n
}

// Fences is the number of source positions the processor remembers for an entity (what keeps
// replays from counting twice): it follows the sources the entity's open windows may still get
// replayed records from.
func (d *Driver) Fences(entity string) int {
	d.t.Helper()
	p := partitioner.Partition([]byte(entity), int32(d.opts.Partitions))
	b, _ := d.tables[p].Get(entity)
	if b == nil {
		return 0
	}
	ent, err := state.Decode(b)
	if err != nil {
		d.t.Fatalf("abacustest: state of %q: %v", entity, err)
	}
	return len(ent.Fences)
}

// PartitionRecord is what partition p of the processor keeps about itself under its own key: its
// stream time, its inputs' watermarks, and each set's grace and live start (state.SetGrace). It is
// what a backfill reads from the group table to know which windows the processor owns. False when
// the partition has written none yet.
func (d *Driver) PartitionRecord(p int32) (*state.Partition, bool) {
	d.t.Helper()
	if p < 0 || int(p) >= len(d.tables) {
		d.t.Fatalf("abacustest: no partition %d", p)
	}
	b, _ := d.tables[p].Get(d.tickKeys[p])
	if b == nil {
		return nil, false
	}
	rec, err := state.DecodePartition(b)
	if err != nil {
		d.t.Fatalf("abacustest: record of partition %d: %v", p, err)
	}
	return rec, true
}
