// Package keyindex keeps the key index of an aggregates table (layout in package schema): it
// says whether an index is complete, makes one complete beside an empty table, rebuilds one from
// the aggregates table, and lists a set's keys from it. The aggregates sink writes the index as
// it writes windows (sinks.AggregatesEncoder.KeyIndex); this package is what admin commands and
// queries use.
package keyindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
)

// Complete reports whether the key index of the aggregates table agg (its family is family) is
// complete for each set's keys: the table exists and holds a marker of any version. A missing
// table is no error: the index is simply not there.
func Complete(ctx context.Context, r store.Reader, agg, family string) (bool, error) {
	v, err := Version(ctx, r, agg, family)
	return v >= 1, err
}

// Version returns the version of the complete key index of the aggregates table agg (its family
// is family), schema.KeyIndexVersion or an earlier one, or 0 when the index is not complete (or
// not there). Version 2 and later also list every set's keys in one scan (Listing.EverySet).
func Version(ctx context.Context, r store.Reader, agg, family string) (int, error) {
	v := 0
	err := r.Scan(ctx, store.ScanSpec{Table: schema.KeyIndexTable(agg), Family: family,
		Start: schema.KeyIndexMarkerRow, Stop: append(bytes.Clone(schema.KeyIndexMarkerRow), 0), Limit: 1},
		func(_ []byte, cells []store.Cell) bool {
			for _, c := range cells {
				if string(c.Qualifier) == schema.KeyIndexMarkerQualifier && len(c.Value) == 1 &&
					c.Value[0] >= 1 && c.Value[0] <= schema.KeyIndexVersion {
					v = int(c.Value[0])
				}
			}
			return false
		})
	if errors.Is(err, store.ErrNoSuchTable) {
		return 0, nil
	}
	return v, err
}

// MarkComplete writes the marker that vouches for the index of the aggregates table laid out by agg.
func MarkComplete(ctx context.Context, w store.Writer, agg schema.TableLayout) error {
	c := store.Cell{Table: schema.KeyIndexTable(agg.Name), Row: schema.KeyIndexMarkerRow, Family: []byte(agg.Family),
		Qualifier: []byte(schema.KeyIndexMarkerQualifier), Timestamp: schema.KeyIndexMarkerTimestamp,
		Value: []byte{schema.KeyIndexVersion}}
	return write(ctx, w, []store.Cell{c})
}

// write lands cells, retrying the ones that failed for a transient cause a few times.
func write(ctx context.Context, w store.Writer, cells []store.Cell) error {
	for try := 0; ; try++ {
		failed, err := w.Write(ctx, cells)
		if err == nil && len(failed) == 0 {
			return nil
		}
		if err == nil {
			var again []store.Cell
			for _, f := range failed {
				if f.Permanent {
					return fmt.Errorf("keyindex: writing %s: %w", cells[f.Index].Table, f.Err)
				}
				again = append(again, cells[f.Index])
			}
			cells, err = again, failed[0].Err
		}
		if try >= 5 || ctx.Err() != nil {
			return fmt.Errorf("keyindex: writing %s: %w", cells[0].Table, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100<<try) * time.Millisecond):
		}
	}
}

// Empty reports whether table has no rows.
func Empty(ctx context.Context, r store.Reader, table string) (bool, error) {
	empty := true
	err := r.Scan(ctx, store.ScanSpec{Table: table, Limit: 1}, func([]byte, []store.Cell) bool { empty = false; return false })
	return empty, err
}

// Stats say what a rebuild did.
type Stats struct {
	Keys  int64 // set and key pairs indexed (two rows each: the set's, and the key's among every set's)
	Reads int64 // reads of the aggregates table
}

// rebuildParallel is how many salt buckets a rebuild walks at once.
const rebuildParallel = 8

// Rebuild writes the index row of every set and key of the aggregates table laid out by agg (its
// salt bucket count is buckets), and then the marker. It reads one row per set and key: from
// each, the walk jumps past that key's other windows of the set. The index rows get the
// timestamps the sink gives them (schema.KeyIndexTimestamp of the newest window), so a rebuild
// beside running sinks rewrites what they write. Run it after every aggregates sink writes the
// index (it checks the index table at start): a key first written by a sink that does not would
// be missing from an index marked complete.
func Rebuild(ctx context.Context, st interface {
	store.Reader
	store.Writer
}, agg schema.TableLayout, buckets int, progress func(Stats)) (Stats, error) {
	var keys, reads atomic.Int64
	keysTable, fam := schema.KeyIndexTable(agg.Name), []byte(agg.Family)
	var mu sync.Mutex // serialises progress
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(rebuildParallel)
	for b := range max(buckets, 1) {
		g.Go(func() error {
			cursor, stop := []byte{byte(b)}, store.PrefixEnd([]byte{byte(b)})
			var batch []store.Cell
			flush := func() error {
				if len(batch) == 0 {
					return nil
				}
				if err := write(gctx, st, batch); err != nil {
					return err
				}
				keys.Add(int64(len(batch) / 2)) // a set and key pair is two rows: its own and among every set's
				batch = batch[:0]
				if progress != nil {
					mu.Lock()
					progress(Stats{Keys: keys.Load(), Reads: reads.Load()})
					mu.Unlock()
				}
				return nil
			}
			for {
				var row []byte
				var newest int64
				err := st.Scan(gctx, store.ScanSpec{Table: agg.Name, Family: agg.Family, Start: cursor, Stop: stop, Limit: 1},
					func(k []byte, cells []store.Cell) bool {
						row = bytes.Clone(k)
						for _, c := range cells {
							newest = max(newest, c.Timestamp)
						}
						return false
					})
				reads.Add(1)
				if err != nil {
					return fmt.Errorf("keyindex: reading %s: %w", agg.Name, err)
				}
				if row == nil {
					return flush()
				}
				key, rest, err := schema.ReadComponent(row[1:])
				var set string
				if err == nil {
					set, rest, err = schema.ReadComponent(rest)
				}
				if err != nil || key == "" || set == "" {
					cursor = append(row, 0) // not an abacus window row: step over it
					continue
				}
				ts := schema.KeyIndexTimestamp(newest, agg.TTL)
				for _, s := range []string{set, schema.KeyIndexEverySet} {
					batch = append(batch, store.Cell{Table: keysTable, Row: schema.KeyIndexRow(s, key), Family: fam,
						Qualifier: []byte(schema.KeyIndexQualifier), Timestamp: ts, Value: []byte{}})
				}
				if len(batch) >= 1000 {
					if err := flush(); err != nil {
						return err
					}
				}
				// The first row of a key's set is its newest window (window starts are reversed);
				// the next read starts past the set's rows of this key.
				cursor = store.PrefixEnd(row[:len(row)-len(rest)])
			}
		})
	}
	if err := g.Wait(); err != nil {
		return Stats{Keys: keys.Load(), Reads: reads.Load()}, err
	}
	s := Stats{Keys: keys.Load(), Reads: reads.Load()}
	return s, MarkComplete(ctx, st, agg)
}

// ErrTooMany is returned by List with the keys found when it examined its limit of index rows.
var ErrTooMany = errors.New("keyindex: listing examined its limit of keys")

// Listing is what List lists.
type Listing struct {
	Table  string // the aggregates table whose index is read
	Family string // the index's column family (the aggregates table's)
	Set    string // the set whose keys are listed; "" for every set's
	Prefix string // only keys that start with it
	Limit  int    // at most this many keys
	// MaxExamined bounds the index rows read: past it, List returns what it found with
	// ErrTooMany.
	MaxExamined int
	Match       func(key string) bool // only keys it passes; nil: all
	// EverySet, with Set "", lists every set's keys from the rows that repeat them all
	// (schema.KeyIndexEverySet): one scan. Only for an index of version 2 or later (Version).
	EverySet bool
}

// List returns, sorted, the first Limit keys of the listing, and whether more matched. Call it
// only on a complete index (Complete).
//
// A set's keys are one scan of the rows set | prefix..., stopped after Limit+1 matches. For any
// set, it finds each set present with a one-row read, lists that set the same way and merges:
// the first Limit of the union are among the first Limit+1 of each set.
func List(ctx context.Context, r store.Reader, q Listing) ([]string, bool, error) {
	l := &lister{r: r, table: schema.KeyIndexTable(q.Table), family: q.Family, prefix: q.Prefix, limit: q.Limit,
		budget: q.MaxExamined, match: q.Match, seen: map[string]bool{}}
	var err error
	switch {
	case q.Set != "":
		err = l.listSet(ctx, q.Set)
	case q.EverySet:
		err = l.listSet(ctx, schema.KeyIndexEverySet)
	default:
		err = l.listAll(ctx)
	}
	if err != nil && !errors.Is(err, ErrTooMany) {
		return nil, false, fmt.Errorf("keyindex: listing %s: %w", l.table, err)
	}
	out := l.out
	slices.Sort(out)
	if err != nil {
		return out[:min(len(out), q.Limit)], false, err
	}
	if len(out) > q.Limit {
		return out[:q.Limit], true, nil
	}
	return out, false, nil
}

// lister is one List: what it found and what it may still examine.
type lister struct {
	r             store.Reader
	table, family string
	prefix        string
	limit, budget int
	match         func(string) bool
	seen          map[string]bool
	out           []string
}

// listSet adds the first limit+1 keys of set that match.
func (l *lister) listSet(ctx context.Context, set string) error {
	esc := schema.AppendComponent(nil, l.prefix)
	start := append(schema.KeyIndexSetPrefix(set), esc[:len(esc)-2]...) // the prefix without its terminator
	spec := store.ScanSpec{Table: l.table, Family: l.family, Start: start, Stop: store.PrefixEnd(start)}
	if l.match == nil {
		spec.Limit = l.limit + 1 // sizes the scan's RPCs to the answer
	}
	found := 0
	var lerr error
	err := l.r.Scan(ctx, spec, func(row []byte, _ []store.Cell) bool {
		s, key, err := schema.ParseKeyIndexRow(row)
		if err != nil || s != set {
			return true // not an index row of set
		}
		if l.budget--; l.budget < 0 {
			lerr = ErrTooMany
			return false
		}
		if l.match != nil && !l.match(key) {
			return true
		}
		found++
		if !l.seen[key] {
			l.seen[key] = true
			l.out = append(l.out, key)
		}
		// The rows come in key order: the first limit+1 are all this set can add to the answer.
		return found <= l.limit
	})
	if err != nil {
		return err
	}
	return lerr
}

// listAll lists every set present in the index, each found by a one-row read past the last.
func (l *lister) listAll(ctx context.Context) error {
	cursor := append(bytes.Clone(schema.KeyIndexMarkerRow), 0) // past the marker
	for {
		var row []byte
		err := l.r.Scan(ctx, store.ScanSpec{Table: l.table, Family: l.family, Start: cursor, Limit: 1},
			func(k []byte, _ []store.Cell) bool { row = bytes.Clone(k); return false })
		if err != nil || row == nil {
			return err
		}
		set, _, err := schema.ReadComponent(row)
		if err != nil || set == "" {
			cursor = append(row, 0) // not an index row: step over it
			continue
		}
		if set == schema.KeyIndexEverySet {
			return nil // every set's rows sort before these, which repeat their keys
		}
		if err := l.listSet(ctx, set); err != nil {
			return err
		}
		cursor = store.PrefixEnd(schema.KeyIndexSetPrefix(set))
	}
}
