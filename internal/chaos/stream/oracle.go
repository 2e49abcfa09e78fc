package stream

import (
	"container/heap"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/totals"
)

// SourceRecord is a record of the source topic as the pipeline read it.
type SourceRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time // the record's timestamp, which future-dated events are judged by
}

// Layout is how the deployment lays out its tables.
type Layout struct {
	AggregatesBuckets, FactsBuckets int
	Family                          string
}

// Oracle computes what the tables, the dead-letter topic and the late topic must hold once the
// pipeline has read every record: feed it the source topic's records, each partition in offset
// order.
type Oracle struct {
	layout Layout
	parts  map[int32]*oraclePartition

	// Aggregates and Facts are the expected cells of the two tables.
	Aggregates, Facts *Cells
	// Bad maps the source coordinates of every record that must be dead-lettered to the reason.
	Bad map[deadletter.Source]deadletter.Reason

	// Late maps the source coordinates of every event the engine must route to the late topic to
	// what its late records carry.
	Late map[deadletter.Source]LateSource

	// Counts of what the records turned out to be.
	Records, Applied, Flushes int64
	LateFor                   map[string]int64 // per set: events too late for every window of the set
	// LateRecords counts, per set, the events late for some window of the set: a late record each.
	LateRecords map[string]int64
	// CellsBySet counts the expected aggregate cells of each set.
	CellsBySet map[string]int64

	// rollups holds every rollup window's merged total, by (set, rollup key, start).
	rollups map[windowKey]*oracleWindow
}

// LateSource is an event late for some window of one set or more, as its late records must show
// it: one record per set, keyed by the event's coordinates, carrying its key, value and timestamp.
type LateSource struct {
	Key       string
	Value     uint64 // ValueHash of the record's value
	Timestamp int64  // the record's timestamp, ms
	Sets      []string
}

// oracleWindow is a window's running total: an entity's window of an entity set, an entity's
// contribution to a rollup window (entity is the entity, keyed by it in its partition), or a
// rollup window's merged total (entity is the rollup key).
type oracleWindow struct {
	set      *setDef
	entity   string
	start    int64
	end      int64
	closesAt int64
	n        int64
	sum      float64
	min, max float64
	// lastV is the last value by event time, lastT its event time.
	lastT int64
	lastV float64
}

// add applies one event: among events of one time, the later applied wins the last value, as
// within an entity's window.
func (w *oracleWindow) add(t int64, v float64) {
	if w.n == 0 || t >= w.lastT {
		w.lastT, w.lastV = t, v
	}
	w.n++
	w.sum += v
	w.min, w.max = min(w.min, v), max(w.max, v)
}

// merge adds a closed contribution c to a rollup total: contributions merge in no particular
// order, so the last value of two at one time is the larger.
func (w *oracleWindow) merge(c *oracleWindow) {
	if c.n == 0 {
		return
	}
	if w.n == 0 || c.lastT > w.lastT || (c.lastT == w.lastT && c.lastV > w.lastV) {
		w.lastT, w.lastV = c.lastT, c.lastV
	}
	w.n += c.n
	w.sum += c.sum
	w.min, w.max = min(w.min, c.min), max(w.max, c.max)
}

type oraclePartition struct {
	streamTime int64
	open       map[windowKey]*oracleWindow
	due        windowHeap
}

type windowKey struct {
	set    string
	entity string // the entity, or a rollup total's key
	start  int64
}

// NewOracle starts an oracle for tables laid out as l.
func NewOracle(l Layout) *Oracle {
	return &Oracle{layout: l, parts: map[int32]*oraclePartition{},
		Aggregates: NewCells(), Facts: NewCells(),
		Bad: map[deadletter.Source]deadletter.Reason{}, Late: map[deadletter.Source]LateSource{},
		LateFor: map[string]int64{}, LateRecords: map[string]int64{}, CellsBySet: map[string]int64{},
		rollups: map[windowKey]*oracleWindow{}}
}

// setDef mirrors one aggregate set of the topology.
type setDef struct {
	name             string
	size, adv, grace int64
	aggs             []string // aggregation names, each computed by value
	// rollup, for a rollup set, is an entity's rollup key in the window starting at start; nil
	// for an entity set.
	rollup func(entity string, start int64) string
}

// sets mirrors the topology's aggregate sets (the flush set's windows never close: it has no
// cells to mirror).
var sets = []*setDef{
	{name: SetTumble, size: tumbleSpec.Size(), adv: tumbleSpec.Advance(), grace: tumbleGrace.Milliseconds(),
		aggs: []string{"n", "sum", "max"}},
	{name: SetHop, size: hopSpec.Size(), adv: hopSpec.Advance(), grace: hopGrace.Milliseconds(),
		aggs: []string{"n", "min"}},
	{name: SetRegion, size: tumbleSpec.Size(), adv: tumbleSpec.Advance(), grace: tumbleGrace.Milliseconds(),
		aggs: []string{"n", "sum", "min", "max", "last"}, rollup: RegionAt},
	{name: SetGlobal, size: tumbleSpec.Size(), adv: tumbleSpec.Advance(), grace: tumbleGrace.Milliseconds(),
		aggs: []string{"n", "sum", "min", "max", "mean", "last"}, rollup: func(string, int64) string { return topology.GlobalKey }},
}

// RollupSets names the topology's rollup sets, which the oracle totals from its entities'
// contributions.
func RollupSets() []string {
	var out []string
	for _, s := range sets {
		if s.rollup != nil {
			out = append(out, s.name)
		}
	}
	return out
}

// Feed takes the next record of its partition.
func (o *Oracle) Feed(r SourceRecord) {
	o.Records++
	src := deadletter.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	var ev Event
	if err := json.Unmarshal(r.Value, &ev); err != nil {
		o.Bad[src] = deadletter.Undecodable
		return
	}
	// The engine and the facts sink allow events up to MaxFutureSkew (5 minutes) ahead of their
	// record's timestamp.
	if !r.Timestamp.IsZero() && ev.Time > r.Timestamp.Add(5*time.Minute).UnixMilli() {
		o.Bad[src] = deadletter.Future
		return
	}
	if ev.Entity != string(r.Key) || ev.Entity == "" || ev.Time < 0 {
		// The generator never makes these; a record like this means the stream is not the one
		// the suite produced.
		panic(fmt.Sprintf("oracle: record %s holds entity %q time %d under key %q", src, ev.Entity, ev.Time, r.Key))
	}
	// Facts: one cell per readable event, whatever its lateness.
	o.Facts.Add(schema.FactRow(ev.Entity, ev.Time, o.layout.FactsBuckets), o.layout.Family,
		schema.AppendFactQualifier(nil, ev.Kind, r.Partition, r.Offset), ev.Time, r.Value,
		func() string { return fmt.Sprintf("fact of %s (%s at %d)", src, ev.Entity, ev.Time) })

	p := o.parts[r.Partition]
	if p == nil {
		p = &oraclePartition{streamTime: math.MinInt64, open: map[windowKey]*oracleWindow{}}
		o.parts[r.Partition] = p
	}
	// With one source, a partition's stream time is the largest event time applied (the engine's
	// watermark of its only input). An event is judged by the stream time before it; only then
	// does it move it (for an event later than every other, that is the same as judging it by its
	// own time: its windows all end after it).
	//
	// That is the engine's rule exactly for this deployment: its one source is not re-keyed, so a
	// processor partition has one origin, the source partition, whose watermark is the largest
	// event time applied from it; and the suite's idle timeout (6 h) is never reached, so stream
	// time never moves by the wall clock. Lateness is then a function of each partition's record
	// order alone, and the oracle knows exactly which events are late for which set.
	judge := p.streamTime
	applied := false
	var lateSets []string
	if ev.Kind == TypeFlush {
		o.Flushes++
		applied = true // into the flush set's window, which never closes and emits nothing
	} else if ev.Kind == TypeMeasurement {
		for _, s := range sets {
			hit, late := false, false
			// Every window start s, a multiple of the advance, with s <= t < s+size.
			first := floorDiv(ev.Time-s.size, s.adv)*s.adv + s.adv
			for start := first; start <= ev.Time; start += s.adv {
				if !(start <= ev.Time && ev.Time < start+s.size) {
					continue
				}
				closesAt := start + s.size + s.grace
				if judge >= closesAt {
					late = true // this window is closed: the event is late for it
					continue
				}
				// A rollup set's windows are, at the event's partition, the entity's contributions:
				// judged by the same stream time as its entity windows.
				k := windowKey{s.name, ev.Entity, start}
				w := p.open[k]
				if w == nil {
					w = newWindow(s, ev.Entity, start, closesAt)
					p.open[k] = w
					heap.Push(&p.due, w)
				}
				w.add(ev.Time, ev.V)
				hit = true
			}
			if !hit {
				o.LateFor[s.name]++
			}
			// The engine sends a late record for every set with a closed window of the event's,
			// whether or not the event fell into another window of the set (a hopping event may
			// be late for some windows only).
			if late {
				o.LateRecords[s.name]++
				lateSets = append(lateSets, s.name)
			}
			applied = applied || hit
		}
		if len(lateSets) > 0 {
			o.Late[src] = LateSource{Key: string(r.Key), Value: ValueHash(r.Value), Timestamp: r.Timestamp.UnixMilli(), Sets: lateSets}
		}
		if applied {
			o.Applied++
		}
	}
	if applied {
		p.streamTime = max(p.streamTime, ev.Time)
	}
	for p.due.Len() > 0 && p.due[0].closesAt <= p.streamTime {
		w := heap.Pop(&p.due).(*oracleWindow)
		delete(p.open, windowKey{w.set.name, w.entity, w.start})
		if w.set.rollup != nil {
			o.contribute(w)
		} else {
			o.CellsBySet[w.set.name] += int64(len(w.set.aggs) + 1)
			o.final(w)
		}
	}
}

func newWindow(s *setDef, entity string, start, closesAt int64) *oracleWindow {
	return &oracleWindow{set: s, entity: entity, start: start, end: start + s.size, closesAt: closesAt,
		min: math.Inf(1), max: math.Inf(-1)}
}

// contribute merges an entity's closed contribution into its rollup window's total and writes
// the total's cells again. Merging is commutative and the cells of a total replace the previous
// ones, so once every contribution is in, whatever the order partitions closed them in, the
// cells are the final total's: the one the engine emits once every partition's stream time
// passes the window's close (Open counts the windows not there yet).
func (o *Oracle) contribute(c *oracleWindow) {
	key := c.set.rollup(c.entity, c.start)
	k := windowKey{c.set.name, key, c.start}
	w := o.rollups[k]
	if w == nil {
		w = newWindow(c.set, key, c.start, c.closesAt)
		o.rollups[k] = w
		o.CellsBySet[c.set.name] += int64(len(c.set.aggs) + 1)
	}
	w.merge(c)
	o.final(w)
}

// final adds the cells of a window's final total; for a rollup window, of its total so far.
func (o *Oracle) final(w *oracleWindow) {
	row := schema.AggregateRow(w.entity, w.set.name, w.start, o.layout.AggregatesBuckets)
	desc := func(name string) func() string {
		return func() string {
			return fmt.Sprintf("%s %s window %s %s", w.entity, w.set.name, time.UnixMilli(w.start).UTC().Format(time.RFC3339), name)
		}
	}
	add := func(name string, v totals.Value) {
		b, err := schema.AppendCellValue(nil, v)
		if err != nil {
			panic(err)
		}
		o.Aggregates.Add(row, o.layout.Family, []byte(name), w.end, b, desc(name))
	}
	for _, name := range w.set.aggs {
		add(name, w.value(name))
	}
	// The revision counts the events applied, which for a rollup is the sum of its contributions'.
	o.Aggregates.Add(row, o.layout.Family, []byte(schema.MetaQualifier), w.end, schema.AppendMeta(nil, true, uint64(w.n)), desc(schema.MetaQualifier))
}

// value is the window's value of an aggregation named as in sets.
func (w *oracleWindow) value(name string) totals.Value {
	f := func(x float64) totals.Value { return totals.Value{Kind: totals.KindFloat, Float: x} }
	switch name {
	case "n":
		return totals.Value{Kind: totals.KindInt, Int: w.n}
	case "sum":
		return f(w.sum)
	case "min":
		return f(w.min)
	case "max":
		return f(w.max)
	case "mean":
		return f(w.sum / float64(w.n))
	case "last":
		return f(w.lastV)
	}
	panic("oracle: no aggregation " + name)
}

// RollupTotal describes the oracle's total of a rollup window, for reports of a cell that
// differs; ok is false for a set and key without one.
func (o *Oracle) RollupTotal(set, key string, start int64) (desc string, ok bool) {
	w := o.rollups[windowKey{set, key, start}]
	if w == nil {
		return "", false
	}
	parts := make([]string, 0, len(w.set.aggs)+1)
	for _, name := range w.set.aggs {
		v := w.value(name)
		if v.Kind == totals.KindInt {
			parts = append(parts, fmt.Sprintf("%s=%d", name, v.Int))
		} else {
			parts = append(parts, fmt.Sprintf("%s=%v", name, v.Float))
		}
	}
	parts = append(parts, fmt.Sprintf("last at %d", w.lastT))
	return strings.Join(parts, " "), true
}

// Open returns the windows still open: none once every partition got its flush event. A rollup
// window is open until every partition's stream time passes its close (the partitions the oracle
// has read records of: by the end, every partition has its flush event).
func (o *Oracle) Open() int {
	n := 0
	st := int64(math.MaxInt64)
	for _, p := range o.parts {
		n += len(p.open)
		st = min(st, p.streamTime)
	}
	for _, w := range o.rollups {
		if w.closesAt > st {
			n++
		}
	}
	return n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

type windowHeap []*oracleWindow

func (h windowHeap) Len() int           { return len(h) }
func (h windowHeap) Less(i, j int) bool { return h[i].closesAt < h[j].closesAt }
func (h windowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *windowHeap) Push(x any)        { *h = append(*h, x.(*oracleWindow)) }
func (h *windowHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Cells is a set of cells, kept as 64-bit hashes so that ten million facts fit in memory: each
// cell's coordinates (row, family, qualifier) hash to its key, its timestamp and value to its
// value hash. Descriptions of the first cells added are kept for reports.
type Cells struct {
	m    map[uint64]cellHash
	desc map[uint64]string
	gen  uint32 // comparisons started, for cellHash.seen
}

// maxDescriptions bounds the descriptions kept: reports show a few examples.
const maxDescriptions = 100_000

type cellHash struct {
	ts    int64
	value uint64
	seen  uint32 // the comparison that read this cell, if any
}

// NewCells returns an empty set.
func NewCells() *Cells { return &Cells{m: map[uint64]cellHash{}, desc: map[uint64]string{}} }

// Len is the number of cells.
func (c *Cells) Len() int { return len(c.m) }

// CellKey hashes a cell's coordinates.
func CellKey(row []byte, family string, qualifier []byte) uint64 {
	h := fnv.New64a()
	var n [4]byte
	for _, part := range [][]byte{row, []byte(family), qualifier} {
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum64()
}

// ValueHash hashes a cell's value.
func ValueHash(value []byte) uint64 {
	h := fnv.New64a()
	h.Write(value)
	return h.Sum64()
}

// Add records a cell; desc describes it in reports (called only while few are kept). Adding the
// same coordinates twice keeps the second value, as a later Put of the same cell would.
func (c *Cells) Add(row []byte, family string, qualifier []byte, ts int64, value []byte, desc func() string) {
	k := CellKey(row, family, qualifier)
	c.m[k] = cellHash{ts: ts, value: ValueHash(value)}
	if desc != nil && len(c.desc) < maxDescriptions {
		c.desc[k] = desc()
	}
}

// Diff is the outcome of comparing a table with a set of expected cells.
type Diff struct {
	Compared      int64 // cell versions of the table read
	Missing       int64 // expected cells the table does not hold
	Extra         int64 // cells the table holds that are not expected
	WrongValue    int64 // cells whose newest version has another timestamp or value
	ExtraVersions int64 // versions beyond the first of any cell
	Examples      []string
}

// Mismatches counts every difference.
func (d *Diff) Mismatches() int64 { return d.Missing + d.Extra + d.WrongValue + d.ExtraVersions }

func (d *Diff) example(format string, args ...any) {
	if len(d.Examples) < 12 {
		d.Examples = append(d.Examples, fmt.Sprintf(format, args...))
	}
}

// Comparer compares the cells of a table, read in the table's order (every version of a cell
// together, newest first), with the expected set. Call Cell for each version read, then Finish.
// One comparison of a set runs at a time.
type Comparer struct {
	want     *Cells
	gen      uint32
	describe func(row, family, qualifier []byte) string
	lastKey  uint64
	haveLast bool
	D        Diff
}

// Compare starts a comparison with the set; describe names a table cell in reports.
func (c *Cells) Compare(describe func(row, family, qualifier []byte) string) *Comparer {
	c.gen++
	return &Comparer{want: c, gen: c.gen, describe: describe}
}

// Cell takes one version of a cell read from the table, and reports whether it is an expected
// cell, read once, with the expected timestamp and value.
func (cmp *Comparer) Cell(row, family, qualifier []byte, ts int64, value []byte) bool {
	cmp.D.Compared++
	k := CellKey(row, string(family), qualifier)
	if cmp.haveLast && k == cmp.lastKey {
		cmp.D.ExtraVersions++
		cmp.D.example("extra version of %s at %d", cmp.describe(row, family, qualifier), ts)
		return false
	}
	cmp.lastKey, cmp.haveLast = k, true
	w, ok := cmp.want.m[k]
	if !ok {
		cmp.D.Extra++
		cmp.D.example("extra cell %s at %d", cmp.describe(row, family, qualifier), ts)
		return false
	}
	if w.seen == cmp.gen {
		// Versions of one cell come together: a cell read again later is a hash clash or a
		// server that returned rows out of order; either way the comparison cannot vouch for it.
		cmp.D.ExtraVersions++
		cmp.D.example("cell %s read twice", cmp.describe(row, family, qualifier))
		return false
	}
	w.seen = cmp.gen
	cmp.want.m[k] = w
	if w.ts != ts || w.value != ValueHash(value) {
		cmp.D.WrongValue++
		cmp.D.example("cell %s: timestamp %d value %x, want timestamp %d and another value", cmp.describe(row, family, qualifier), ts, value, w.ts)
		return false
	}
	return true
}

// Finish counts the expected cells never read, and returns the outcome.
func (cmp *Comparer) Finish() Diff {
	var missing []string
	for k, w := range cmp.want.m {
		if w.seen != cmp.gen {
			cmp.D.Missing++
			if len(missing) < 12 {
				d := cmp.want.desc[k]
				if d == "" {
					d = fmt.Sprintf("cell %016x", k)
				}
				missing = append(missing, d)
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		cmp.D.example("missing %s", m)
	}
	return cmp.D
}
