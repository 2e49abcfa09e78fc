package query

import (
	"bytes"
	"container/list"
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
)

// Cache keeps what readers of one aggregate table read of settled windows (schema.SettledAfter:
// windows that started over 15 minutes ago), so that a dashboard's week of minute windows is
// read from HBase once and then only its last 20 minutes are. It keeps, by set, entity and the aggregates
// read, one span of window starts with every window the table held in it, absences included:
// that is what lets it answer a range without reading it.
//
// It never answers from a span it cannot vouch for. A window row of the past can still be
// written (a sink that fell behind, a replay, a backfill), and every writer that writes one then
// moves its set's epoch (schema.EpochRow). A span is kept with the epoch read before it was
// read, and answers only while the set's epoch is that one; the epochs are read again every
// EpochRecheck, so a window of the past written now shows within that much more. Without a
// complete key index, or when the epochs cannot be read, every read goes to the table.
//
// A Cache is safe for concurrent use, by the readers of one table only (Reader.WithCache). It
// holds at most its size in bytes, as estimated, dropping the spans used least recently.
type Cache struct {
	// Now is the clock that says which windows are settled (time.Now when nil). The writers
	// decide by their own clocks, so it must be the wall clock in a server; benchmarks over a
	// dataset of the past set it to the dataset's end, so that its last minutes are read as live.
	Now func() time.Time

	max int64

	mu      sync.Mutex
	used    int64
	entries map[cacheKey]*list.Element // of *span
	lru     list.List                  // most recently used first

	ep      epochState
	recheck time.Duration // EpochRecheck; tests read the epochs at every request

	hits, misses, evictions atomic.Int64
}

// EpochRecheck is how often a cache reads its table's epochs again.
const EpochRecheck = 2 * time.Second

// cacheSkew is how much later than schema.SettledAfter a cache takes a window to be settled: a
// writer's clock may be this much behind the reader's.
const cacheSkew = 5 * time.Minute

// NewCache returns a cache of at most maxBytes (estimated; DefaultCacheBytes when 0 or less).
func NewCache(maxBytes int64) *Cache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	return &Cache{max: maxBytes, entries: map[cacheKey]*list.Element{}, recheck: EpochRecheck}
}

// DefaultCacheBytes is the size of a cache made with no size. A window is kept as Columns: 25
// bytes, and 16 for each aggregate read (a quantile aggregate 40 more, plus 16 a quantile), so
// this keeps about 6.5 million windows of one aggregate (a week of minute windows of 650
// entities), or a million windows of eight.
const DefaultCacheBytes = 256 << 20

// CacheStats is what a cache did and holds.
type CacheStats struct {
	Hits, Misses int64 // reads of settled windows answered from the cache, and not
	Evictions    int64 // spans dropped to stay within the size
	Bytes        int64 // estimated size of what it holds
	Spans        int   // entity spans held
}

// Stats reports what the cache did and holds.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load(),
		Bytes: c.used, Spans: len(c.entries)}
}

// cacheKey is what a span is kept by: a set's entity, and the aggregates read (empty: all).
type cacheKey struct{ set, entity, aggs string }

// span is every window the table held, at epoch, with a start in [lo, hi), oldest first.
type span struct {
	key     cacheKey
	epoch   string
	lo, hi  int64
	windows *Columns
	bytes   int64
}

// get returns, when a span of key at epoch starts at or before from and reaches it, its windows
// with a start in [from, to) (oldest first) and how far up to to it covers; otherwise nothing,
// and from. The windows share the span's arrays.
func (c *Cache) get(key cacheKey, epoch string, from, to int64) (*Columns, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, from
	}
	s := el.Value.(*span)
	if s.epoch != epoch || s.lo > from || s.hi < from {
		return nil, from
	}
	c.lru.MoveToFront(el)
	covered := min(s.hi, to)
	return s.windows.within(from, covered), covered
}

// put keeps ws, the windows with a start in [from, to) read at epoch (oldest first), joining them
// to the span of key when it is of the same epoch and meets the range.
func (c *Cache) put(key cacheKey, epoch string, from, to int64, ws *Columns) {
	base := int64(128 + len(key.set) + len(key.entity) + len(key.aggs))
	s := &span{key: key, epoch: epoch, lo: from, hi: to, windows: ws}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		old := el.Value.(*span)
		if old.epoch == epoch && old.lo <= to && from <= old.hi {
			s.windows = concat(ws.Entity, ws.Set, old.windows.within(old.lo, from), ws, old.windows.within(to, old.hi))
			s.lo, s.hi = min(old.lo, from), max(old.hi, to)
		}
		c.remove(el)
	}
	s.bytes = base + s.windows.bytes()
	if s.bytes > c.max {
		return
	}
	c.entries[key] = c.lru.PushFront(s)
	c.used += s.bytes
	for c.used > c.max {
		c.remove(c.lru.Back())
		c.evictions.Add(1)
	}
}

func (c *Cache) remove(el *list.Element) {
	s := el.Value.(*span)
	c.lru.Remove(el)
	delete(c.entries, s.key)
	c.used -= s.bytes
}

// epochState is the epochs of a table's sets, as last read.
type epochState struct {
	mu   sync.Mutex
	at   time.Time         // when read; zero: never
	vals map[string]string // by set; a set with no epoch cell has ""
	ok   bool              // the last read succeeded
}

// epoch returns the epoch of set, reading the epoch row again when it was read EpochRecheck ago.
// ok is false when the row cannot be read: nothing is then answered or kept.
func (c *Cache) epoch(ctx context.Context, r *Reader, set string) (string, bool) {
	e := &c.ep
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at.IsZero() || time.Since(e.at) >= c.recheck {
		vals := map[string]string{}
		err := r.store.Scan(ctx, store.ScanSpec{Table: schema.KeyIndexTable(r.table), Family: r.family,
			Start: schema.EpochRow, Stop: append(bytes.Clone(schema.EpochRow), 0), Limit: 1},
			func(_ []byte, cells []store.Cell) bool {
				for _, cell := range cells {
					vals[string(cell.Qualifier)] = string(cell.Value)
				}
				return false
			})
		if err != nil {
			if ctx.Err() != nil {
				return "", false // this request's end says nothing of the table: read again next time
			}
			e.ok = false
		} else {
			e.ok, e.vals = true, vals
		}
		e.at = time.Now()
	}
	return e.vals[set], e.ok
}

// cachedColumns is Columns' read of stored windows through the cache: the settled part of the
// range from the cache (read and kept on a miss), the rest from the table.
func (r *Reader) cachedColumns(ctx context.Context, set, entity string, o Options) (*Columns, error) {
	p, err := r.planRead(ctx, set, entity, o)
	if err != nil || p.done != nil {
		return p.done, err
	}
	var rest *Columns
	if p.need {
		if rest, err = r.stored(ctx, set, entity, p.rest); err != nil {
			return nil, err
		}
	}
	return p.finish(rest), nil
}

// plannedRead is one entity's read through the cache, between the cache's answer and the table's:
// what the cache gave, and what the table must still answer.
type plannedRead struct {
	c       *Cache
	entity  string
	set     string
	done    *Columns // the whole answer, when no more is to be read
	past    *Columns // the cache's part
	newest  *Columns // read first, newest first with a limit
	need    bool     // the table must answer rest
	rest    Options
	key     cacheKey
	epoch   string
	covered int64 // the rest starts here
	end     int64 // and what of it is settled, before end, joins the cache
	direct  bool  // the cache takes no part: rest is the whole read
}

// planRead reads what the cache holds of o's range (and, newest first with a limit, the
// unsettled part first) and says what the table must still answer.
func (r *Reader) planRead(ctx context.Context, set, entity string, o Options) (plannedRead, error) {
	c := r.cache
	p := plannedRead{c: c, entity: entity, set: set}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	settled := now.Add(-schema.SettledAfter - cacheSkew).UnixMilli()
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if !o.From.IsZero() {
		from = o.From.UnixMilli()
	}
	if !o.To.IsZero() {
		to = o.To.UnixMilli()
	}
	if from >= settled || !r.keyIndexed(ctx) {
		p.need, p.rest, p.direct = true, o, true
		return p, nil
	}
	epoch, ok := c.epoch(ctx, r, set)
	if !ok {
		p.need, p.rest, p.direct = true, o, true
		return p, nil
	}
	// Newest first with a limit, the unsettled part may be all the answer needs ("the latest
	// windows"): it is read first, and the cache only when it falls short.
	if o.Limit > 0 && !o.OldestFirst && to > settled {
		no := o
		no.From = time.UnixMilli(settled)
		newest, err := r.stored(ctx, set, entity, no)
		if err != nil {
			return p, err
		}
		if newest.Len() >= o.Limit {
			p.done = newest
			return p, nil
		}
		p.newest = newest
		to = settled
	}
	p.end = min(to, settled)
	p.key = cacheKey{set: set, entity: entity, aggs: strings.Join(slices.Sorted(slices.Values(o.Aggregates)), "\x00")}
	p.epoch = epoch
	past, covered := c.get(p.key, epoch, from, p.end)
	if covered > from {
		c.hits.Add(1)
		if r.ttl > 0 {
			past = unexpired(past, now.Add(-r.ttl).UnixMilli())
		}
		if o.Limit > 0 && o.OldestFirst && past.Len() >= o.Limit {
			past = past.slice(0, o.Limit)
			to = covered // nothing after is needed
		}
		if o.Budget != nil && o.Budget.left.Add(-int64(past.Len())) < 0 {
			return p, ErrBudget
		}
	} else {
		c.misses.Add(1)
	}
	p.past, p.covered = past, covered
	// The rest comes from the table, in one scan, whole (its settled part joins the span);
	// Columns applies the limit.
	if covered < to {
		ro := o
		ro.OldestFirst = false // a forward scan: HBase's reversed scans seek row by row
		ro.Limit = 0
		ro.From, ro.To = time.Time{}, time.Time{}
		if covered != math.MinInt64 {
			ro.From = time.UnixMilli(covered)
		}
		if to != math.MaxInt64 {
			ro.To = time.UnixMilli(to)
		}
		p.need, p.rest = true, ro
	}
	return p, nil
}

// finish keeps the settled part of rest, the table's answer to p.rest, and joins the parts.
func (p plannedRead) finish(rest *Columns) *Columns {
	if p.direct {
		return rest
	}
	if p.need && p.covered < p.end {
		n, _ := slices.BinarySearch(rest.starts, p.end)
		p.c.put(p.key, p.epoch, p.covered, p.end, rest.slice(0, n))
	}
	return concat(p.entity, p.set, p.past, rest, p.newest)
}

// unexpired leaves out the windows whose cells the table's TTL has expired at cutoff (a cell
// expires once its timestamp, the window's end, is older than the TTL): the table no longer
// answers them, so neither does the cache.
func unexpired(c *Columns, cutoff int64) *Columns {
	return c.filter(func(i int) bool { return c.ends[i] >= cutoff })
}
