package query

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/abacus-stream/abacus/totals"
)

// Columns are windows of one entity of one set, oldest first, held a column at a time: each
// window's start, end, revision and flags, and for each aggregate one 16-byte cell per window. A
// Window holds its values in a map, about 1 KiB a window; a chart of one aggregate over 100
// entities' days reads 144,000 windows, and a cache of Windows held a fifth of what the query
// benchmark asks (issue 46). Columns take about 40 bytes a window of one aggregate, and hold no
// pointers but the few quantile lists and custom values, so the garbage collector has nothing
// to walk in them.
//
// Columns read from a Reader may share their arrays with its cache: they are not to be changed.
type Columns struct {
	// Entity and Set say whose windows these are.
	Entity, Set string

	starts, ends []int64 // unix ms
	revs         []uint64
	flags        []uint8 // flagFinal, flagLive, flagCoarser
	cols         []column
	coarser      string // the set of the rows flagged flagCoarser (Coarsened)
}

const (
	flagFinal = 1 << iota
	flagLive
	flagCoarser // a window of the coarser set, in a Coarsened read
)

// column is one aggregate's values, a cell per window.
type column struct {
	name  string
	cells []cell
	// quants holds every list of quantiles of the column in one array (no pointer per window for
	// the garbage collector to follow in a cache full of them); a cell of KindQuantiles says
	// where its list is (quantSpan).
	quants []totals.Quantile
	blobs  [][]byte // the values that cells of KindBytes index
}

// cell is one window's value of an aggregate: an int's or a float's bits, where its list is in
// its column's quantiles (quantRef), or an index into its column's custom values. Kind 0 is no
// value (an aggregate added to the set while the window was open).
type cell struct {
	kind totals.Kind
	x    uint64
}

// quantRef is the x of a cell whose list is quants[off:off+n]; a list holds the quantiles a set
// declares, far fewer than 1<<24.
func quantRef(off, n int) uint64 { return uint64(off)<<24 | uint64(n) }

// quantSpan is where a cell of KindQuantiles has its list in its column's quants.
func (cl cell) quantSpan() (off, end int) {
	off = int(cl.x >> 24)
	return off, off + int(cl.x&(1<<24-1))
}

func newColumns(entity, set string, names []string) *Columns {
	c := &Columns{Entity: entity, Set: set, cols: make([]column, len(names))}
	for i, n := range names {
		c.cols[i].name = n
	}
	return c
}

// ColumnsOf returns windows (of one entity of one set, at distinct starts) as Columns.
func ColumnsOf(entity, set string, ws []Window) *Columns {
	sorted := slices.SortedStableFunc(slices.Values(ws), func(a, b Window) int { return a.Start.Compare(b.Start) })
	c := newColumns(entity, set, nil)
	for _, w := range sorted {
		c.addWindow(w)
	}
	return c
}

// Len is the number of windows.
func (c *Columns) Len() int {
	if c == nil {
		return 0
	}
	return len(c.starts)
}

// StartMilli is window i's start, in unix milliseconds.
func (c *Columns) StartMilli(i int) int64 { return c.starts[i] }

// EndMilli is window i's end (exclusive), in unix milliseconds.
func (c *Columns) EndMilli(i int) int64 { return c.ends[i] }

// Final reports whether window i is final.
func (c *Columns) Final(i int) bool { return c.flags[i]&flagFinal != 0 }

// Live reports whether window i was read from the processors' state, not the table.
func (c *Columns) Live(i int) bool { return c.flags[i]&flagLive != 0 }

// Revision is the number of events window i's total had applied.
func (c *Columns) Revision(i int) uint64 { return c.revs[i] }

// Aggregates are the names of the aggregates held, in the order read.
func (c *Columns) Aggregates() []string {
	out := make([]string, len(c.cols))
	for i, col := range c.cols {
		out[i] = col.name
	}
	return out
}

// Column is the index of aggregate name among the columns, for Value; -1 when none holds it.
func (c *Columns) Column(name string) int {
	for i := range c.cols {
		if c.cols[i].name == name {
			return i
		}
	}
	return -1
}

// Value is window i's value of the aggregate in column col (Column), and whether it has one.
func (c *Columns) Value(col, i int) (totals.Value, bool) {
	k := &c.cols[col]
	cl := k.cells[i]
	v := totals.Value{Name: k.name, Kind: cl.kind}
	switch cl.kind {
	case totals.KindInt:
		v.Int = int64(cl.x)
	case totals.KindFloat:
		v.Float = math.Float64frombits(cl.x)
	case totals.KindQuantiles:
		if off, end := cl.quantSpan(); end > off {
			v.Quantiles = k.quants[off:end:end]
		}
	case totals.KindBytes:
		v.Bytes = k.blobs[cl.x]
	default:
		return totals.Value{}, false
	}
	return v, true
}

// Number is window i's value of the aggregate in column col as a number, when it is an int or a
// float: what a chart reads, without the rest of a totals.Value.
func (c *Columns) Number(col, i int) (float64, bool) {
	switch cl := c.cols[col].cells[i]; cl.kind {
	case totals.KindInt:
		return float64(int64(cl.x)), true
	case totals.KindFloat:
		return math.Float64frombits(cl.x), true
	}
	return 0, false
}

// Window is window i as a Window (with a map of its values).
func (c *Columns) Window(i int) Window {
	set := c.Set
	if c.flags[i]&flagCoarser != 0 {
		set = c.coarser
	}
	w := Window{Entity: c.Entity, Set: set, Start: time.UnixMilli(c.starts[i]), End: time.UnixMilli(c.ends[i]),
		Final: c.flags[i]&flagFinal != 0, Live: c.flags[i]&flagLive != 0, Revision: c.revs[i],
		Values: make(map[string]totals.Value, len(c.cols))}
	for k := range c.cols {
		if v, ok := c.Value(k, i); ok {
			w.Values[v.Name] = v
		}
	}
	return w
}

// Windows are the windows as Windows, newest first unless oldestFirst.
func (c *Columns) Windows(oldestFirst bool) []Window {
	n := c.Len()
	if n == 0 {
		return nil
	}
	out := make([]Window, n)
	for i := range n {
		j := i
		if !oldestFirst {
			j = n - 1 - i
		}
		out[j] = c.Window(i)
	}
	return out
}

// addRow appends a window without values (each column gets an empty cell) and returns its index.
func (c *Columns) addRow(start, end int64, rev uint64, flags uint8) int {
	c.starts = append(c.starts, start)
	c.ends = append(c.ends, end)
	c.revs = append(c.revs, rev)
	c.flags = append(c.flags, flags)
	for k := range c.cols {
		c.cols[k].cells = append(c.cols[k].cells, cell{})
	}
	return len(c.starts) - 1
}

// column returns the index of aggregate name, adding an empty column for it when there is none.
func (c *Columns) column(name string) int {
	if k := c.Column(name); k >= 0 {
		return k
	}
	c.cols = append(c.cols, column{name: name, cells: make([]cell, len(c.starts))})
	return len(c.cols) - 1
}

// set stores v as row i's value in column k.
func (c *Columns) set(k, i int, v totals.Value) {
	col := &c.cols[k]
	cl := cell{kind: v.Kind}
	switch v.Kind {
	case totals.KindInt:
		cl.x = uint64(v.Int)
	case totals.KindFloat:
		cl.x = math.Float64bits(v.Float)
	case totals.KindQuantiles:
		cl.x = quantRef(len(col.quants), len(v.Quantiles))
		col.quants = append(col.quants, v.Quantiles...)
	case totals.KindBytes:
		cl.x = uint64(len(col.blobs))
		col.blobs = append(col.blobs, v.Bytes)
	default:
		cl = cell{}
	}
	col.cells[i] = cl
}

// addWindow appends w (whose start must come after every row's).
func (c *Columns) addWindow(w Window) {
	var flags uint8
	if w.Final {
		flags |= flagFinal
	}
	if w.Live {
		flags |= flagLive
	}
	i := c.addRow(w.Start.UnixMilli(), w.End.UnixMilli(), w.Revision, flags)
	for _, name := range slices.Sorted(maps.Keys(w.Values)) {
		c.set(c.column(name), i, w.Values[name])
	}
}

// addFrom appends row i of src, mapping its columns to c's by name (m: src's column to c's, made
// by columnMap).
func (c *Columns) addFrom(src *Columns, i int, m []int) {
	j := c.addRow(src.starts[i], src.ends[i], src.revs[i], src.flags[i])
	for k, ck := range m {
		if v, ok := src.Value(k, i); ok {
			c.set(ck, j, v)
		}
	}
}

// columnMap maps src's columns to c's, adding to c those it lacks.
func (c *Columns) columnMap(src *Columns) []int {
	m := make([]int, len(src.cols))
	for k := range src.cols {
		m[k] = c.column(src.cols[k].name)
	}
	return m
}

// slice is a view of rows [i, j): it shares c's arrays.
func (c *Columns) slice(i, j int) *Columns {
	out := &Columns{Entity: c.Entity, Set: c.Set, coarser: c.coarser, starts: c.starts[i:j:j], ends: c.ends[i:j:j], revs: c.revs[i:j:j],
		flags: c.flags[i:j:j], cols: make([]column, len(c.cols))}
	for k, col := range c.cols {
		col.cells = col.cells[i:j:j]
		// What a view adds goes to arrays of its own, never into c's (or the cache's).
		col.quants = col.quants[:len(col.quants):len(col.quants)]
		col.blobs = col.blobs[:len(col.blobs):len(col.blobs)]
		out.cols[k] = col
	}
	return out
}

// within is the view of the rows with a start in [from, to).
func (c *Columns) within(from, to int64) *Columns {
	i, _ := slices.BinarySearch(c.starts, from)
	j, _ := slices.BinarySearch(c.starts, to)
	return c.slice(i, max(i, j))
}

// reverse turns rows read newest first into oldest first, in place (only for Columns of one's own).
func (c *Columns) reverse() {
	slices.Reverse(c.starts)
	slices.Reverse(c.ends)
	slices.Reverse(c.revs)
	slices.Reverse(c.flags)
	for k := range c.cols {
		slices.Reverse(c.cols[k].cells)
	}
}

// concat returns the rows of every part in turn (each oldest first, each part's after the one
// before it). A single part with rows is returned as it is.
func concat(entity, set string, parts ...*Columns) *Columns {
	var nonEmpty []*Columns
	n := 0
	for _, p := range parts {
		if p.Len() > 0 {
			nonEmpty = append(nonEmpty, p)
			n += p.Len()
		}
	}
	if len(nonEmpty) == 1 {
		return nonEmpty[0]
	}
	out := newColumns(entity, set, nil)
	out.grow(n)
	for _, p := range nonEmpty {
		out.appendAll(p)
	}
	return out
}

// appendAll appends every row of src, column by column.
func (c *Columns) appendAll(src *Columns) {
	if src.coarser != "" {
		c.coarser = src.coarser
	}
	m := c.columnMap(src) // before the rows grow: a column added here is empty for the rows before
	n := src.Len()
	c.starts = append(c.starts, src.starts...)
	c.ends = append(c.ends, src.ends...)
	c.revs = append(c.revs, src.revs...)
	c.flags = append(c.flags, src.flags...)
	filled := make([]bool, len(c.cols))
	for k, ck := range m {
		dst, s := &c.cols[ck], &src.cols[k]
		filled[ck] = true
		if len(s.quants) == 0 && len(s.blobs) == 0 {
			dst.cells = append(dst.cells, s.cells...)
			continue
		}
		for _, cl := range s.cells {
			switch cl.kind {
			case totals.KindQuantiles:
				off, end := cl.quantSpan()
				cl.x = quantRef(len(dst.quants), end-off)
				dst.quants = append(dst.quants, s.quants[off:end]...)
			case totals.KindBytes:
				dst.blobs = append(dst.blobs, s.blobs[cl.x])
				cl.x = uint64(len(dst.blobs) - 1)
			}
			dst.cells = append(dst.cells, cl)
		}
	}
	for k := range c.cols {
		if !filled[k] {
			c.cols[k].cells = append(c.cols[k].cells, make([]cell, n)...)
		}
	}
}

// grow makes room for n more rows.
func (c *Columns) grow(n int) {
	c.starts = slices.Grow(c.starts, n)
	c.ends = slices.Grow(c.ends, n)
	c.revs = slices.Grow(c.revs, n)
	c.flags = slices.Grow(c.flags, n)
}

// filter returns the rows keep accepts (c itself when it accepts all).
func (c *Columns) filter(keep func(i int) bool) *Columns {
	n := c.Len()
	first := -1
	for i := range n {
		if !keep(i) {
			first = i
			break
		}
	}
	if first < 0 {
		return c
	}
	out := newColumns(c.Entity, c.Set, c.Aggregates())
	out.coarser = c.coarser
	m := out.columnMap(c)
	for i := range n {
		if i < first || (i > first && keep(i)) {
			out.addFrom(c, i, m)
		}
	}
	return out
}

// cut keeps the limit rows an answer in the order asked begins with: the oldest, or the newest.
func (c *Columns) cut(limit int, oldestFirst bool) *Columns {
	n := c.Len()
	if limit <= 0 || n <= limit {
		return c
	}
	if oldestFirst {
		return c.slice(0, limit)
	}
	return c.slice(n-limit, n)
}

// bytes estimates the memory c's rows hold (what a cache counts).
func (c *Columns) bytes() int64 {
	n := int64(c.Len())
	b := n * 25
	for _, col := range c.cols {
		b += 16 * n
		b += 16 * int64(len(col.quants))
		for _, x := range col.blobs {
			b += 24 + int64(len(x))
		}
	}
	return b
}
