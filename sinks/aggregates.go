package sinks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AggregatesEncoder turns each totals record (package totals) into the cells of one window row, as
// package schema lays them out:
//
//	row       = salt | entity | aggregate set | reversed window start   (schema.AggregateRow)
//	qualifier = aggregate name, one cell per aggregate, plus schema.MetaQualifier
//	timestamp = window end (exclusive, ms): every firing of a window rewrites the same cells
//	value     = the aggregate's value (schema.AppendCellValue)
//
// The cells hold absolute totals, so a replayed totals record rewrites identical cells.
//
// With KeyIndex set it also writes the key index (schema.KeyIndexTable): the row of a set and key,
// and the key's row among every set's keys (schema.KeyIndexEverySet), each
// whenever no batch of this encoder has landed it yet for the window's refresh period
// (schema.KeyIndexTimestamp). It learns what landed from the sink (a write that failed or was
// dropped leaves the key to be written again), so a listing never misses a key whose windows
// are in the table.
type AggregatesEncoder struct {
	Table       string
	Family      string
	SaltBuckets int
	// KeyIndex is the key index table to write beside Table; empty writes none.
	KeyIndex string
	// KeyIndexTTL is the tables' TTL, which sets how often a key's index row is written again.
	KeyIndexTTL time.Duration
	// KeyIndexCache bounds how many index rows (two per key, and one more per further set of it)
	// the encoder remembers as landed (default 1<<20, about 64 MiB at most); when full it forgets
	// them all and writes each again once.
	KeyIndexCache int

	mu      sync.Mutex
	landed  map[indexKey]int64 // the newest index timestamp a batch landed
	pending map[indexKey]int64 // written into a batch not yet landed

	// Encode's memory, as FactsEncoder's: Encode is not safe for concurrent use, and an encoder
	// must not be copied once it has encoded.
	family []byte
	slab   slab
	dec    totals.Decoder
}

// indexKey is a set and a key of the key index.
type indexKey struct{ set, key string }

// DefaultKeyIndexCache is the default of AggregatesEncoder.KeyIndexCache.
const DefaultKeyIndexCache = 1 << 20

// Check reports a layout the encoder cannot write with; NewFlushThenCommit calls it, so a sink
// with a zero encoder fails at start instead of dead-lettering every record.
func (a *AggregatesEncoder) Check() error {
	return checkLayout("aggregates encoder", a.Table, a.Family, a.SaltBuckets)
}

func checkLayout(what, table, family string, buckets int) error {
	var errs []error
	if table == "" || family == "" {
		errs = append(errs, fmt.Errorf("%s: Table and Family are required", what))
	}
	if buckets < 1 || buckets > schema.MaxSaltBuckets {
		errs = append(errs, fmt.Errorf("%s: SaltBuckets %d outside 1..%d", what, buckets, schema.MaxSaltBuckets))
	}
	return errors.Join(errs...)
}

// Encode implements Encoder.
func (a *AggregatesEncoder) Encode(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error) {
	r, err := a.dec.Decode(rec.Value)
	if err != nil {
		return dst, deadletter.Errorf(deadletter.Invalid, "aggregates: %w", err)
	}
	if r.Entity == "" || r.End <= r.Start || r.Start < 0 {
		return dst, deadletter.Errorf(deadletter.Invalid, "aggregates: window of entity %q from %d to %d is not valid", r.Entity, r.Start, r.End)
	}
	// Row, qualifiers and values of the record's cells are cut from one slab, sized first.
	size := schema.MaxAggregateRowLen(r.Entity, r.Set) + len(schema.MetaQualifier) + schema.MetaLen
	for _, v := range r.Values {
		size += len(v.Name) + schema.CellValueLen(v)
	}
	buf := a.slab.take(size)
	row := cut(&buf, func(b []byte) []byte { return schema.AppendAggregateRow(b, r.Entity, r.Set, r.Start, a.SaltBuckets) })
	if string(a.family) != a.Family {
		a.family = []byte(a.Family)
	}
	fam := a.family
	n := len(dst)
	for _, v := range r.Values {
		if err := schema.ValidAggregateName(v.Name); err != nil {
			return dst[:n], deadletter.Errorf(deadletter.Invalid, "aggregates: %w", err)
		}
		var err error
		val := cut(&buf, func(b []byte) []byte {
			out, e := schema.AppendCellValue(b, v)
			if err = e; e != nil {
				return b
			}
			return out
		})
		if err != nil {
			return dst[:n], deadletter.Errorf(deadletter.Invalid, "aggregates: %s: %w", v.Name, err)
		}
		q := cut(&buf, func(b []byte) []byte { return append(b, v.Name...) })
		dst = append(dst, store.Cell{Table: a.Table, Row: row, Family: fam, Qualifier: q, Timestamp: r.End, Value: val})
	}
	meta := cut(&buf, func(b []byte) []byte { return schema.AppendMeta(b, r.Final, r.Revision) })
	mq := cut(&buf, func(b []byte) []byte { return append(b, schema.MetaQualifier...) })
	dst = append(dst, store.Cell{Table: a.Table, Row: row, Family: fam, Qualifier: mq, Timestamp: r.End, Value: meta})
	if a.KeyIndex != "" {
		// The key's row of its set, and its row among every set's keys: each written once per
		// refresh period, whichever set's window brings the key.
		ts := schema.KeyIndexTimestamp(r.End, a.KeyIndexTTL)
		for _, set := range []string{r.Set, schema.KeyIndexEverySet} {
			if a.toIndex(set, r.Entity, ts) {
				dst = append(dst, store.Cell{Table: a.KeyIndex, Row: schema.KeyIndexRow(set, r.Entity), Family: fam,
					Qualifier: []byte(schema.KeyIndexQualifier), Timestamp: ts, Value: []byte{}})
			}
		}
	}
	return dst, nil
}

// toIndex reports whether the index cell of set and key with timestamp ts is to be written, and
// notes it as pending when it is.
func (a *AggregatesEncoder) toIndex(set, key string, ts int64) bool {
	k := indexKey{set, key}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.landed[k] >= ts || a.pending[k] >= ts {
		return false
	}
	if a.pending == nil {
		a.pending = map[indexKey]int64{}
	}
	a.pending[k] = ts
	return true
}

// batchLanded notes the index cells of a batch that landed in the store.
func (a *AggregatesEncoder) batchLanded(cells []store.Cell) {
	if a.KeyIndex == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	limit := a.KeyIndexCache
	if limit <= 0 {
		limit = DefaultKeyIndexCache
	}
	for i := range cells {
		c := &cells[i]
		if c.Table != a.KeyIndex {
			continue
		}
		set, key, err := schema.ParseKeyIndexRow(c.Row)
		if err != nil {
			continue
		}
		k := indexKey{set, key}
		if a.landed == nil || len(a.landed) >= limit {
			a.landed = make(map[indexKey]int64, min(limit, 1024))
		}
		a.landed[k] = max(a.landed[k], c.Timestamp)
		if a.pending[k] <= c.Timestamp {
			delete(a.pending, k)
		}
	}
}

// batchesDropped forgets what is pending: the batches that held it may never land, so each key
// is written into a later batch again.
func (a *AggregatesEncoder) batchesDropped() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.pending)
}

// EpochCells returns the cells that move the epochs (schema.EpochRow) of the sets of which cells
// hold a settled window row at now, none when they hold none or the encoder writes no key index.
// Whoever writes cells encoded by a, and holds readers' caches to the table (query.Cache), writes
// these once cells have landed and before it counts them written: a reader that read the epoch
// before them then finds it moved.
func (a *AggregatesEncoder) EpochCells(cells []store.Cell, now time.Time) []store.Cell {
	if a.KeyIndex == "" {
		return nil
	}
	settled := now.Add(-schema.SettledAfter).UnixMilli()
	var sets map[string]bool
	for i := range cells {
		c := &cells[i]
		// One meta cell per window row; the start is the row's last 8 bytes, so only rows of the
		// past are parsed whole.
		if c.Table != a.Table || string(c.Qualifier) != schema.MetaQualifier || len(c.Row) < 8 {
			continue
		}
		if start := math.MaxInt64 - int64(binary.BigEndian.Uint64(c.Row[len(c.Row)-8:])); start >= settled {
			continue
		}
		_, set, _, err := schema.ParseAggregateRow(c.Row)
		if err != nil {
			continue
		}
		if sets == nil {
			sets = map[string]bool{}
		}
		sets[set] = true
	}
	if len(sets) == 0 {
		return nil
	}
	out := make([]store.Cell, 0, len(sets))
	for set := range sets {
		out = append(out, store.Cell{Table: a.KeyIndex, Row: schema.EpochRow, Family: []byte(a.Family),
			Qualifier: []byte(set), Timestamp: schema.EpochTimestamp, Value: schema.EpochValue(now)})
	}
	return out
}
