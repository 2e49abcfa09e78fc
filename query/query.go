// Package query reads window aggregates back: from the aggregate table that the aggregates sink
// writes (HBase or the embedded cell store) and, for windows still open, from the processors'
// live state (a LiveSource, such as query/live). It is the Go API (Reader, Window, Options, Page)
// and what the HTTP APIs serve of a topology (Served); the servers themselves are query/httpapi
// and query/opentsdb.
//
// It only reads: it must never write a cell or change a group's state.
package query

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/keyindex"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
	"golang.org/x/sync/errgroup"
)

// Window is one entity's aggregates over one window of an aggregate set.
type Window struct {
	// Entity and Set say whose window it is, as answers hold several entities' windows.
	Entity   string
	Set      string
	Start    time.Time // inclusive
	End      time.Time // exclusive
	Final    bool      // false while the window may still change
	Revision uint64    // events applied to the window when this total was emitted
	Live     bool      // read from the processors' state, not yet from the table
	// Values are the window's aggregates, by aggregation name.
	Values map[string]totals.Value
}

// Options select windows by start time and bound how many come back.
type Options struct {
	// From and To bound the window start: From <= start < To. Zero means unbounded.
	From, To time.Time
	// Limit is the most windows per entity; 0 means no limit.
	Limit int
	// OldestFirst returns windows in ascending start order; the default is newest first.
	OldestFirst bool
	// NoLive leaves out still-open windows read from the processors.
	NoLive bool
	// Aggregates, when set, reads only these aggregates of each window (and its finality): a
	// panel that charts one aggregate reads a fraction of the cells. Live windows keep all.
	Aggregates []string
	// Budget, when set, bounds the stored windows read over every read that shares it (see
	// Budget); a read that finds it spent stops with ErrBudget.
	Budget *Budget
}

// Budget is a number of stored windows that several reads share: each takes one for every stored
// window it reads. Reads of several entities running at once (Many, Page) then stop together as
// soon as their total passes what a request may read, so no more than that plus one row per read
// is ever held. It is safe for concurrent use.
type Budget struct{ left atomic.Int64 }

// NewBudget returns a budget of n windows.
func NewBudget(n int) *Budget {
	b := &Budget{}
	b.left.Store(int64(n))
	return b
}

// Left is how many windows are left; below zero once a read stopped on it.
func (b *Budget) Left() int { return int(b.left.Load()) }

// ErrBudget is what a read returns when the Budget of its Options ran out.
var ErrBudget = errors.New("query: window budget exhausted")

// LiveSource gives the still-open windows of an entity, from the processors' state (goka views).
type LiveSource interface {
	OpenWindows(ctx context.Context, set, entity string) ([]Window, error)
}

// Source is what a Reader reads: cells, and the layout the table was created with.
type Source interface {
	store.Reader
	SaltBuckets(ctx context.Context, table string) (int, error)
}

// Reader answers window queries over one aggregate table. Build it with NewReader.
type Reader struct {
	store   store.Reader
	table   string
	family  string
	buckets int
	live    LiveSource

	index *indexState // shared by the readers WithLive makes
	steps *setSteps   // the spacing of each set's windows, seen in reads (shared likewise)
	slots *scanSlots  // the scans it runs at once, shared fairly among requests (and WithLive's copies)
	cache *Cache      // settled windows read before; nil: none
	ttl   time.Duration
	// noBatch reads several entities a scan each (tests compare it with the batched read).
	noBatch bool
}

// indexState is what a reader knows of its table's key index.
type indexState struct {
	complete  atomic.Bool  // the key index is complete: listings read it (never unset)
	everySet  atomic.Bool  // and it lists every set's keys in one scan (version 2; never unset)
	checkedAt atomic.Int64 // unix ns of the last look for the index's marker that found none
}

// keyIndexRecheck is how long a reader trusts having found no complete key index: a rebuild
// (`abacus admin reindex`) finishing is noticed this long after at most.
const keyIndexRecheck = 30 * time.Second

// keyIndexed reports whether the key index of the table is complete, looking again for its
// marker when the last look found none keyIndexRecheck ago. A failed look counts as none: the
// listing then walks the aggregates table, which answers the same, slower.
func (r *Reader) keyIndexed(ctx context.Context) bool {
	complete := r.index.complete.Load()
	if complete && r.index.everySet.Load() {
		return true
	}
	// Not complete, or complete at version 1: a rebuild may make it complete, or version 2.
	if last := r.index.checkedAt.Load(); last != 0 && time.Since(time.Unix(0, last)) < keyIndexRecheck {
		return complete
	}
	v, err := keyindex.Version(ctx, r.store, r.table, r.family)
	r.index.checkedAt.Store(time.Now().UnixNano())
	if err == nil && v >= 2 {
		r.index.everySet.Store(true)
	}
	if err == nil && v >= 1 {
		r.index.complete.Store(true)
	}
	return complete || (v >= 1 && err == nil)
}

// NewReader returns a reader of an aggregate table. The salt bucket count is read from the table
// (schema.AttrSaltBuckets), never taken from the caller: rows salted with another count would be
// looked for in the wrong buckets and silently not found.
func NewReader(ctx context.Context, src Source, table, family string) (*Reader, error) {
	if src == nil || table == "" || family == "" {
		return nil, errors.New("query: NewReader needs a source, a table and a family")
	}
	n, err := src.SaltBuckets(ctx, table)
	if err != nil {
		return nil, fmt.Errorf("query: aggregate table %s: %w", table, err)
	}
	r := &Reader{store: src, table: table, family: family, buckets: n, index: &indexState{}, steps: &setSteps{}, slots: newScanSlots(DefaultMaxScans)}
	r.keyIndexed(ctx)
	if fs, ok := src.(familySettings); ok {
		// The TTL, for a cache not to answer windows the table has expired. A failed read leaves
		// none: the table is read again at the first request anyway.
		if settings, err := fs.FamilySettings(ctx, table, family); err == nil {
			r.ttl = ttlOf(settings)
		}
	}
	return r, nil
}

// familySettings is a Source that also reads a family's settings (store.Tables).
type familySettings interface {
	FamilySettings(ctx context.Context, table, family string) (map[string]string, error)
}

// ttlOf is the TTL of HBase family settings: seconds, or none when absent or FOREVER.
func ttlOf(settings map[string]string) time.Duration {
	s, err := strconv.ParseInt(settings["TTL"], 10, 64)
	if err != nil || s <= 0 || s >= math.MaxInt32 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// WithCache returns a reader that keeps settled windows in c and answers from it what c can
// vouch for (see Cache). c must serve readers of this reader's table only.
func (r *Reader) WithCache(c *Cache) *Reader {
	cp := *r
	cp.cache = c
	return &cp
}

// WithLive returns a reader that adds the windows still open in the processors, read from live.
func (r *Reader) WithLive(live LiveSource) *Reader {
	c := *r
	c.live = live
	return &c
}

// WithMaxScans returns a reader that runs at most n window scans at once (DefaultMaxScans when n
// is 0 or less), shared among its requests so that a request holding fewer goes first.
func (r *Reader) WithMaxScans(n int) *Reader {
	c := *r
	c.slots = newScanSlots(n)
	return &c
}

// Table is the aggregate table the reader reads.
func (r *Reader) Table() string { return r.table }

// ErrInvalid is wrapped by errors about the request rather than the store.
var ErrInvalid = errors.New("invalid query")

// Windows returns the windows of one entity of a set, newest first unless asked otherwise.
func (r *Reader) Windows(ctx context.Context, set, entity string, o Options) ([]Window, error) {
	c, err := r.Columns(ctx, set, entity, o)
	if err != nil {
		return nil, err
	}
	return c.Windows(o.OldestFirst), nil
}

// Columns returns what Windows does, as Columns: oldest first whichever order o asks (o's order
// and limit say which windows, when the limit cuts).
func (r *Reader) Columns(ctx context.Context, set, entity string, o Options) (*Columns, error) {
	if entity == "" {
		return nil, fmt.Errorf("%w: set and entity are required", ErrInvalid)
	}
	if err := checkOptions(set, o); err != nil {
		return nil, err
	}
	var (
		out *Columns
		err error
	)
	// With a limit and no start, the cache would read an entity's whole history to keep it.
	if r.cache != nil && (o.Limit == 0 || !o.From.IsZero()) {
		out, err = r.cachedColumns(ctx, set, entity, o)
	} else {
		out, err = r.stored(ctx, set, entity, o)
	}
	if err != nil {
		return nil, fmt.Errorf("query: windows of %s in %s: %w", entity, set, err)
	}
	if r.live != nil && !o.NoLive {
		live, err := r.live.OpenWindows(ctx, set, entity)
		if err != nil {
			return nil, fmt.Errorf("query: live windows of %s in %s: %w", entity, set, err)
		}
		out = mergeLive(out, live, o)
	}
	return out.cut(o.Limit, o.OldestFirst), nil
}

// stored reads the windows of one entity of a set from the table, as Windows selects them. A
// range expected to hold several times the rows one round trip of the HBase client carries
// (splitRows) is read in parts at once, each of at least that many rows (at most splitParts),
// rather than in one round trip after another: a first read of one entity's week of minutes
// (10,080 rows, 11 round trips) took 26-33 ms in one scan and 18 ms in four, on the two cores of
// the benchmark's machine. A day's 1,440 rows gained nothing from two parts.
func (r *Reader) stored(ctx context.Context, set, entity string, o Options) (*Columns, error) {
	parts := r.splitParts(set, o)
	if parts <= 1 {
		return r.storedRange(ctx, set, entity, o)
	}
	from, to := o.From.UnixMilli(), o.To.UnixMilli()
	out := make([]*Columns, parts)
	ctx, _ = requestSlots(ctx) // the parts share the request's place among the others
	g, gctx := errgroup.WithContext(ctx)
	for k := range parts {
		po := o
		po.From = time.UnixMilli(from + (to-from)*int64(k)/int64(parts))
		po.To = time.UnixMilli(from + (to-from)*int64(k+1)/int64(parts))
		g.Go(func() error {
			var err error
			out[k], err = r.storedRange(gctx, set, entity, po)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return concat(entity, set, out...), nil
}

// splitRows is the rows the HBase client fetches per round trip of a scan (hbase.Scan.Caching's
// default), and splitParts the most parts one entity's read is split into.
const (
	splitRows  = 1000
	splitParts = 4
)

// splitParts is how many parts stored reads o's range of set in: one unless the range is bounded,
// unlimited, and holds at least twice splitRows windows at the spacing seen of the set's windows.
func (r *Reader) splitParts(set string, o Options) int {
	if o.Limit > 0 || o.From.IsZero() || o.To.IsZero() {
		return 1
	}
	step := r.steps.of(set)
	if step <= 0 {
		return 1
	}
	rows := o.To.Sub(o.From).Milliseconds() / step
	return int(max(1, min(splitParts, rows/splitRows)))
}

// setSteps are the spacing of each set's windows (the least distance between two windows' starts
// seen in a read): a tumbling set's size, a hopping set's hop. A set not yet read has none, and
// its reads are not split.
type setSteps struct{ m sync.Map } // set name -> int64 ms

func (s *setSteps) of(set string) int64 {
	if v, ok := s.m.Load(set); ok {
		return v.(int64)
	}
	return 0
}

// saw notes the spacing of c's windows (oldest first).
func (s *setSteps) saw(set string, c *Columns) {
	step := int64(0)
	for i := 1; i < c.Len(); i++ {
		if d := c.starts[i] - c.starts[i-1]; d > 0 && (step == 0 || d < step) {
			step = d
		}
	}
	if step == 0 {
		return
	}
	if old := s.of(set); old == 0 || step < old {
		s.m.Store(set, step)
	}
}

// storedRange reads the windows of one entity of a set from the table in one scan.
func (r *Reader) storedRange(ctx context.Context, set, entity string, o Options) (*Columns, error) {
	prefix := schema.AggregatePrefix(entity, set, r.buckets)
	spec := store.ScanSpec{Table: r.table, Family: r.family, Reversed: o.OldestFirst}
	if len(o.Aggregates) > 0 {
		spec.Qualifiers = append(spec.Qualifiers, []byte(schema.MetaQualifier))
		for _, a := range o.Aggregates {
			spec.Qualifiers = append(spec.Qualifiers, []byte(a))
		}
	}
	spec.Start, spec.Stop = rowRange(prefix, o)
	var scanErr error
	sctx, user := requestSlots(ctx)
	if err := r.slots.acquire(sctx, user); err != nil {
		return nil, err
	}
	dec := rowDecoder{prefix: prefix, cols: newColumns(entity, set, o.Aggregates)}
	err := r.store.Scan(sctx, spec, func(row []byte, cells []store.Cell) bool {
		if err := dec.add(row, cells); err != nil {
			scanErr = err
			return false
		}
		if o.Budget != nil && o.Budget.left.Add(-1) < 0 {
			scanErr = ErrBudget
			return false
		}
		// Merging live windows only adds or replaces, so no stored window past the limit can come
		// back into it.
		return o.Limit == 0 || dec.cols.Len() < o.Limit
	})
	r.slots.release(user)
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return nil, err
	}
	if !o.OldestFirst {
		dec.cols.reverse()
	}
	r.steps.saw(set, dec.cols)
	return dec.cols, nil
}

// rowRange is the rows of an entity's windows (its rows' prefix) with a start in [o.From, o.To).
// Rows sort by reversed start, the newest window first: start <= To-1 is the lower row bound.
func rowRange(prefix []byte, o Options) (start, stop []byte) {
	start = prefix
	if !o.To.IsZero() {
		start = binary.BigEndian.AppendUint64(clone(prefix), schema.ReverseTime(o.To.UnixMilli()-1))
	}
	if !o.From.IsZero() {
		stop = binary.BigEndian.AppendUint64(clone(prefix), schema.ReverseTime(o.From.UnixMilli()-1))
	} else {
		stop = store.PrefixEnd(prefix)
	}
	return start, stop
}

// storedMany reads, in one forward scan, the windows of several entities of a set from the
// table, each as its options select them (no limit): one round trip, where stored takes one per
// read. The reads' rows must lie apart (an entity twice only for ranges apart) and, to be read in
// one round trip, in one region (a salt bucket); HBase seeks from one range to the next.
func (r *Reader) storedMany(ctx context.Context, set string, entities []string, opts []Options) ([]*Columns, error) {
	type one struct {
		i           int
		start, stop []byte
	}
	ranges := make([]one, len(entities))
	decs := make([]rowDecoder, len(entities))
	for i, e := range entities {
		prefix := schema.AggregatePrefix(e, set, r.buckets)
		start, stop := rowRange(prefix, opts[i])
		ranges[i] = one{i, start, stop}
		decs[i] = rowDecoder{prefix: prefix, cols: newColumns(e, set, opts[i].Aggregates)}
	}
	slices.SortFunc(ranges, func(a, b one) int { return bytes.Compare(a.start, b.start) })
	spec := store.ScanSpec{Table: r.table, Family: r.family, Start: ranges[0].start}
	for _, rg := range ranges {
		spec.Ranges = append(spec.Ranges, store.RowRange{Start: rg.start, Stop: rg.stop})
		spec.Stop = maxBytes(spec.Stop, rg.stop)
	}
	if aggs := opts[0].Aggregates; len(aggs) > 0 {
		spec.Qualifiers = append(spec.Qualifiers, []byte(schema.MetaQualifier))
		for _, a := range aggs {
			spec.Qualifiers = append(spec.Qualifiers, []byte(a))
		}
	}
	budget := opts[0].Budget
	var scanErr error
	sctx, user := requestSlots(ctx)
	if err := r.slots.acquire(sctx, user); err != nil {
		return nil, err
	}
	err := r.store.Scan(sctx, spec, func(row []byte, cells []store.Cell) bool {
		// The read whose range holds the row: the last starting at or before it.
		k, found := slices.BinarySearchFunc(ranges, row, func(rg one, row []byte) int { return bytes.Compare(rg.start, row) })
		if !found {
			k--
		}
		if k < 0 || bytes.Compare(row, ranges[k].stop) >= 0 {
			scanErr = fmt.Errorf("query: row %x is in none of the ranges of %s read together", row, set)
			return false
		}
		if err := decs[ranges[k].i].add(row, cells); err != nil {
			scanErr = err
			return false
		}
		if budget != nil && budget.left.Add(-1) < 0 {
			scanErr = ErrBudget
			return false
		}
		return true
	})
	r.slots.release(user)
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return nil, err
	}
	out := make([]*Columns, len(entities))
	for i := range decs {
		decs[i].cols.reverse()
		out[i] = decs[i].cols
	}
	return out, nil
}

func maxBytes(a, b []byte) []byte {
	if bytes.Compare(a, b) >= 0 {
		return a
	}
	return b
}

// EntityOptions bound an entity listing.
type EntityOptions struct {
	// Limit is the most entities returned (default 100).
	Limit int
	// MaxRows bounds the entities looked at to find them (default 200,000): the listing skips
	// from one entity's rows to the next, one short read each, and stops there rather than walk a
	// huge table.
	MaxRows int
	// Prefix keeps only entities that start with it.
	Prefix string
	// Match, when set, keeps only the entities it accepts. The entities it refuses count against
	// MaxRows all the same.
	Match func(entity string) bool
}

// ErrEntityScanLimit is what ListEntities returns, with the entities it found, when it looked at
// EntityOptions.MaxRows entities before the end of the table.
var ErrEntityScanLimit = errors.New("entity listing stopped at its bound")

// Entities lists, in order, entities that have windows of set (of any set when set is ""), and
// reports whether the listing stopped at a bound (Limit, or MaxRows) before the end of the table.
// It reads one row per entity (ListEntities), not every window of every entity.
func (r *Reader) Entities(ctx context.Context, set string, o EntityOptions) ([]string, bool, error) {
	list, more, err := r.ListEntities(ctx, set, o)
	switch {
	case errors.Is(err, ErrEntityScanLimit):
		return list, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("query: entities of %s: %w", set, err)
	}
	return list, more, nil
}

// ListEntities is Entities for callers that tell its two bounds apart (the OpenTSDB API refuses a
// filter that did not finish, and answers one cut at its limit): more reports only that more than
// o.Limit entities matched, and a listing that looked at o.MaxRows entities first returns what it
// found with ErrEntityScanLimit. Other errors are the store's, unwrapped.
func (r *Reader) ListEntities(ctx context.Context, set string, o EntityOptions) ([]string, bool, error) {
	if o.Limit <= 0 {
		o.Limit = 100
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 200_000
	}
	return r.listEntities(ctx, set, o.Prefix, o.Limit, o.MaxRows, o.Match)
}

// Many returns the windows of several entities, each selected by o. It does not say whether
// o.Limit cut an entity's windows: Page does, and says where the next page starts.
func (r *Reader) Many(ctx context.Context, set string, entities []string, o Options) (map[string][]Window, error) {
	return r.byEntity(ctx, set, nil, entities, o)
}

// byEntity is ManyColumns' answer as Windows, by entity.
func (r *Reader) byEntity(ctx context.Context, set string, coarse *Coarse, entities []string, o Options) (map[string][]Window, error) {
	cs, err := r.ManyColumns(ctx, set, coarse, entities, o)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]Window, len(entities))
	for i, e := range entities {
		out[e] = cs[i].Windows(o.OldestFirst)
	}
	return out, nil
}

// ManyColumns returns the windows of several entities as Columns, in the order of entities, each
// as Columns reads it, or as CoarsenedColumns does through coarse when it is not nil. Without a
// limit, newest first, the entities of a salt bucket are read from the table in one scan
// (batchRead).
func (r *Reader) ManyColumns(ctx context.Context, set string, coarse *Coarse, entities []string, o Options) ([]*Columns, error) {
	if len(entities) == 0 {
		return nil, fmt.Errorf("%w: no entity given", ErrInvalid)
	}
	if o.Limit == 0 && !o.OldestFirst && len(entities) > 1 && !r.noBatch {
		// Each entity once (rows go to their read by range), answered for each time it is named.
		uniq := slices.Clone(entities)
		slices.Sort(uniq)
		uniq = slices.Compact(uniq)
		var res []*Columns
		var err error
		if coarse != nil {
			res, err = r.manyCoarsened(ctx, set, *coarse, uniq, o)
		} else {
			res, err = r.manyBatched(ctx, set, uniq, o)
		}
		if err != nil || len(uniq) == len(entities) && slices.Equal(uniq, entities) {
			return res, err
		}
		out := make([]*Columns, len(entities))
		for i, e := range entities {
			k, _ := slices.BinarySearch(uniq, e)
			out[i] = res[k]
		}
		return out, nil
	}
	return each(ctx, entities, func(ctx context.Context, e string) (*Columns, error) {
		if coarse != nil {
			return r.CoarsenedColumns(ctx, set, *coarse, e, o)
		}
		return r.Columns(ctx, set, e, o)
	})
}

// entityRead is one read of a batch: an entity and the options that select its windows.
type entityRead struct {
	entity string
	o      Options
}

// manyBatched is ManyColumns' read of several entities (no limit, newest first): what the cache
// holds of each, then what the table must still answer of them in one scan per salt bucket (a
// fleet panel's entities' last minutes: one round trip per bucket, not per entity), then each
// entity's live windows.
func (r *Reader) manyBatched(ctx context.Context, set string, entities []string, o Options) ([]*Columns, error) {
	reads := make([]entityRead, len(entities))
	for i, e := range entities {
		reads[i] = entityRead{e, o}
	}
	return r.batchRead(ctx, set, reads)
}

// batchRead answers each read (no limit, newest first, the same aggregates; an entity twice only
// for ranges apart) as Columns does: through the cache, then the table's part of every read of a
// salt bucket in one scan, then the live windows.
func (r *Reader) batchRead(ctx context.Context, set string, reads []entityRead) ([]*Columns, error) {
	for _, rd := range reads {
		if rd.entity == "" {
			return nil, fmt.Errorf("%w: set and entity are required", ErrInvalid)
		}
		if err := checkOptions(set, rd.o); err != nil {
			return nil, err
		}
	}
	ctx, _ = requestSlots(ctx) // the request's scans share its place among the others
	plans := make([]plannedRead, len(reads))
	for i, rd := range reads {
		if r.cache == nil {
			plans[i] = plannedRead{entity: rd.entity, set: set, need: true, rest: rd.o, direct: true}
			continue
		}
		p, err := r.planRead(ctx, set, rd.entity, rd.o)
		if err != nil {
			return nil, fmt.Errorf("query: windows of %s in %s: %w", rd.entity, set, err)
		}
		plans[i] = p
	}
	// The table's reads, by salt bucket: a bucket is a region (tables are pre-split on them), and
	// one scan reads its entities' ranges; the buckets are read manyParallel at a time.
	var order []byte
	byBucket := map[byte][]int{}
	for i, p := range plans {
		if !p.need {
			continue
		}
		b := schema.AggregatePrefix(p.entity, set, r.buckets)[0]
		if r.buckets <= 1 {
			b = 0
		}
		if _, ok := byBucket[b]; !ok {
			order = append(order, b)
		}
		byBucket[b] = append(byBucket[b], i)
	}
	rests := make([]*Columns, len(plans))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(manyParallel)
	for _, b := range order {
		idx := byBucket[b]
		g.Go(func() error {
			es, os := make([]string, len(idx)), make([]Options, len(idx))
			for k, i := range idx {
				es[k], os[k] = plans[i].entity, plans[i].rest
			}
			res, err := r.storedMany(gctx, set, es, os)
			if err != nil {
				return fmt.Errorf("query: windows of %d entities in %s: %w", len(es), set, err)
			}
			for k, i := range idx {
				rests[i] = res[k]
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]*Columns, len(plans))
	for i, p := range plans {
		out[i] = p.finish(rests[i])
		if o := reads[i].o; r.live != nil && !o.NoLive {
			live, err := r.live.OpenWindows(ctx, set, p.entity)
			if err != nil {
				return nil, fmt.Errorf("query: live windows of %s in %s: %w", p.entity, set, err)
			}
			out[i] = mergeLive(out[i], live, o)
		}
	}
	return out, nil
}

// checkOptions refuses options no read can answer.
func checkOptions(set string, o Options) error {
	if set == "" {
		return fmt.Errorf("%w: set and entity are required", ErrInvalid)
	}
	if !o.From.IsZero() && !o.To.IsZero() && !o.From.Before(o.To) {
		return fmt.Errorf("%w: from %s is not before to %s", ErrInvalid, o.From.Format(time.RFC3339), o.To.Format(time.RFC3339))
	}
	if o.Limit < 0 {
		return fmt.Errorf("%w: negative limit %d", ErrInvalid, o.Limit)
	}
	return nil
}

// manyParallel is how many entities' scans each runs at once. One scan waits on a region server
// most of its time (bench/query: 50 entities' days read one after another took seconds), and a
// region server serves several scans at once; eight stays well inside the client's per-server
// in-flight limit, so a dashboard's panel does not crowd out the sinks' writes.
const manyParallel = 8

// each runs read for each entity (answers in the order given), manyParallel at a time. The first
// error ends the reads.
func each[T any](ctx context.Context, entities []string, read func(context.Context, string) (T, error)) ([]T, error) {
	out := make([]T, len(entities))
	ctx, _ = requestSlots(ctx) // the request's scans share its place among the others
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(manyParallel)
	for i, e := range entities {
		g.Go(func() error {
			ws, err := read(gctx, e)
			out[i] = ws
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// rowDecoder decodes the rows of one entity's windows of one set into Columns: every row starts
// with the same prefix, so only the window start is read from it, and each cell goes into its
// aggregate's column (a week of minute windows is 10,080 rows: a map and strings per row made
// that panel's profile mostly the garbage collector's).
type rowDecoder struct {
	prefix []byte
	cols   *Columns
}

func (d *rowDecoder) add(row []byte, cells []store.Cell) error {
	c := d.cols
	if len(row) != len(d.prefix)+8 || !bytes.HasPrefix(row, d.prefix) {
		return fmt.Errorf("query: row %x is not a window row of %s in %s", row, c.Entity, c.Set)
	}
	start := math.MaxInt64 - int64(binary.BigEndian.Uint64(row[len(d.prefix):]))
	i := c.addRow(start, 0, 0, 0)
	for _, cl := range cells {
		c.ends[i] = cl.Timestamp
		if string(cl.Qualifier) == schema.MetaQualifier {
			final, rev, err := schema.ParseMeta(cl.Value)
			if err != nil {
				return err
			}
			c.revs[i] = rev
			if final {
				c.flags[i] |= flagFinal
			}
			continue
		}
		k := c.Column(string(cl.Qualifier))
		if k < 0 {
			k = c.column(string(cl.Qualifier))
		}
		if len(cl.Value) > 0 && totals.Kind(cl.Value[0]) == totals.KindQuantiles {
			// Into the column's one array of quantiles, without a list of the cell's own.
			col := &c.cols[k]
			off := len(col.quants)
			var err error
			if col.quants, err = schema.AppendQuantiles(col.quants, col.name, cl.Value); err != nil {
				return err
			}
			col.cells[i] = cell{kind: totals.KindQuantiles, x: quantRef(off, len(col.quants)-off)}
			continue
		}
		v, err := schema.ParseCellValue(c.cols[k].name, cl.Value)
		if err != nil {
			return err
		}
		c.set(k, i, v)
	}
	return nil
}

// mergeLive adds live windows that are newer than (or missing from) the stored ones.
func mergeLive(stored *Columns, live []Window, o Options) *Columns {
	var add []Window
	replace := map[int]Window{}
	for _, lw := range live {
		if (!o.From.IsZero() && lw.Start.Before(o.From)) || (!o.To.IsZero() && !lw.Start.Before(o.To)) {
			continue
		}
		lw.Live = true
		if i, ok := slices.BinarySearch(stored.starts, lw.Start.UnixMilli()); ok {
			if !stored.Final(i) && lw.Revision > stored.revs[i] {
				replace[i] = lw
			}
			continue
		}
		add = append(add, lw)
	}
	if len(add) == 0 && len(replace) == 0 {
		return stored
	}
	slices.SortStableFunc(add, func(a, b Window) int { return a.Start.Compare(b.Start) })
	out := newColumns(stored.Entity, stored.Set, stored.Aggregates())
	m := out.columnMap(stored)
	for i, j := 0, 0; i < stored.Len() || j < len(add); {
		switch {
		case j < len(add) && (i == stored.Len() || add[j].Start.UnixMilli() < stored.starts[i]):
			out.addWindow(add[j])
			j++
		default:
			if w, ok := replace[i]; ok {
				out.addWindow(w)
			} else {
				out.addFrom(stored, i, m)
			}
			i++
		}
	}
	return out
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// listEntities lists, sorted, the first limit entities that have windows of set (any set when
// set is ""), start with prefix and pass match (nil: all). It does not read the table whole: in
// each salt bucket it reads one row, takes its entity, and jumps past that entity's rows (or to
// its rows of set), so each entity costs one or two one-row reads. The buckets are walked
// manyParallel at a time: a rollup's few keys share the table with every entity, whose rows the
// walk must step over one read at a time (bench/query: a region listing over 1,000 devices took
// 2,000 reads). Each bucket stops at its own limit+1 matches, so the answer is the first limit in
// order whichever walk ends first, the same at every call. It examines at most maxExamined
// entities, and then returns what it found with ErrEntityScanLimit. more reports that more than
// limit entities matched.
func (r *Reader) listEntities(ctx context.Context, set, prefix string, limit, maxExamined int, match func(string) bool) ([]string, bool, error) {
	if r.keyIndexed(ctx) {
		list, more, err := keyindex.List(ctx, r.store, keyindex.Listing{Table: r.table, Family: r.family, Set: set,
			Prefix: prefix, Limit: limit, MaxExamined: maxExamined, Match: match, EverySet: set == "" && r.index.everySet.Load()})
		if errors.Is(err, keyindex.ErrTooMany) {
			err = ErrEntityScanLimit
		}
		return list, more, err
	}
	escPrefix := schema.AppendComponent(nil, prefix)
	escPrefix = escPrefix[:len(escPrefix)-2] // without the terminator: a prefix of every matching entity's component
	var escSet []byte
	if set != "" {
		escSet = schema.AppendComponent(nil, set)
	}
	var examined atomic.Int64 // across the buckets: maxExamined bounds the listing's reads
	found := make([][]string, max(r.buckets, 1))
	walk := func(ctx context.Context, b int) error {
		start := append([]byte{byte(b)}, escPrefix...)
		stop := store.PrefixEnd(start)
		cursor := start
		jumped, last := "", "" // the entity whose rows of set the cursor was moved to; the last one seen
		for len(found[b]) <= limit {
			if err := ctx.Err(); err != nil {
				return err
			}
			var row []byte
			err := r.store.Scan(ctx, store.ScanSpec{Table: r.table, Family: r.family, Start: cursor, Stop: stop, Limit: 1},
				func(k []byte, _ []store.Cell) bool { row = append([]byte(nil), k...); return false })
			if err != nil {
				return fmt.Errorf("query: listing entities of %s: %w", r.table, err)
			}
			if row == nil {
				return nil
			}
			entity, rest, err := schema.ReadComponent(row[1:])
			if err != nil { // not an abacus aggregate row: step over it
				cursor = append(row, 0)
				continue
			}
			entityEnd := store.PrefixEnd(row[:len(row)-len(rest)])
			if entity != last || last == "" {
				last = entity
				if examined.Add(1) > int64(maxExamined) {
					return ErrEntityScanLimit // ends the other walks too
				}
			}
			if set != "" && !bytes.HasPrefix(rest, escSet) {
				if jumped != entity && bytes.Compare(rest, escSet) < 0 {
					// Rows of sets sorting before set: jump to this entity's rows of set.
					jumped = entity
					cursor = append(row[:len(row)-len(rest):len(row)-len(rest)], escSet...)
					continue
				}
				cursor = entityEnd // the entity has no rows of set
				continue
			}
			if match == nil || match(entity) {
				found[b] = append(found[b], entity)
			}
			cursor = entityEnd
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(manyParallel)
	for b := range found {
		g.Go(func() error { return walk(gctx, b) })
	}
	werr := g.Wait()
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if werr != nil && !errors.Is(werr, ErrEntityScanLimit) {
		return nil, false, werr
	}
	var all []string
	for _, f := range found {
		all = append(all, f...)
	}
	sort.Strings(all)
	if werr != nil {
		return all[:min(len(all), limit)], false, ErrEntityScanLimit
	}
	if len(all) > limit {
		return all[:limit], true, nil
	}
	return all, false, nil
}
