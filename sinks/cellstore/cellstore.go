// Package cellstore is an embedded cell store on goleveldb that keeps HBase's cell semantics: tables
// of rows, column families with a version limit, qualifiers, and versions ordered by timestamp, where
// a Put of an existing (row, family, qualifier, timestamp) replaces that version instead of adding one.
//
// It lets `abacus demo` and fast tests run the sinks and queries with no servers. It is not a
// database for production: it has no WAL beyond LevelDB's, no regions, no TTL expiry, and it must
// never be used where the real HBase is meant.
package cellstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/abacus-stream/abacus/sinks"
	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/iterator"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/storage"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// Store is an embedded cell store. It is safe for concurrent use.
type Store struct {
	db *leveldb.DB
	mu sync.RWMutex
	// tables maps a table to its families' version limits.
	tables map[string]map[string]int
	// MaxCellSize refuses larger values, as HBase's hbase.server.keyvalue.maxsize does (10 MiB).
	MaxCellSize int
}

// Open opens (creating if needed) a store in dir; an empty dir keeps everything in memory.
func Open(dir string) (*Store, error) {
	var (
		db  *leveldb.DB
		err error
	)
	if dir == "" {
		db, err = leveldb.Open(storage.NewMemStorage(), nil)
	} else {
		db, err = leveldb.OpenFile(dir, &opt.Options{})
	}
	if err != nil {
		return nil, fmt.Errorf("cellstore: open %q: %w", dir, err)
	}
	s := &Store{db: db, tables: map[string]map[string]int{}, MaxCellSize: 10 << 20}
	if err := s.loadSchemas(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// Key spaces: schema records and cells.
const (
	spaceSchema = 's'
	spaceCell   = 'c'
)

// CreateTable creates a table whose families keep up to the given number of versions (at least 1).
// Creating an existing table with the same families is a no-op; with other families it is an error.
func (s *Store) CreateTable(table string, families map[string]int) error {
	if table == "" || len(families) == 0 {
		return errors.New("cellstore: a table needs a name and at least one family")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if have, ok := s.tables[table]; ok {
		if !sameFamilies(have, families) {
			return fmt.Errorf("cellstore: table %q exists with families %v, not %v", table, have, families)
		}
		return nil
	}
	fams := map[string]int{}
	val := []byte{}
	for f, v := range families {
		if v < 1 {
			v = 1
		}
		fams[f] = v
		val = sinks.AppendComponent(val, f)
		val = binary.BigEndian.AppendUint32(val, uint32(v))
	}
	if err := s.db.Put(append([]byte{spaceSchema}, table...), val, nil); err != nil {
		return fmt.Errorf("cellstore: create table %q: %w", table, err)
	}
	s.tables[table] = fams
	return nil
}

// Families returns a table's families and their version limits, or false if there is no such table.
func (s *Store) Families(table string) (map[string]int, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f, ok := s.tables[table]
	return f, ok
}

func sameFamilies(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for f := range a {
		if _, ok := b[f]; !ok {
			return false
		}
	}
	return true
}

func (s *Store) loadSchemas() error {
	it := s.db.NewIterator(util.BytesPrefix([]byte{spaceSchema}), nil)
	defer it.Release()
	for it.Next() {
		table := string(it.Key()[1:])
		fams := map[string]int{}
		b := it.Value()
		for len(b) > 0 {
			f, rest, err := sinks.ReadComponent(b)
			if err != nil || len(rest) < 4 {
				return fmt.Errorf("cellstore: schema of table %q is corrupt", table)
			}
			fams[f] = int(binary.BigEndian.Uint32(rest))
			b = rest[4:]
		}
		s.tables[table] = fams
	}
	return it.Error()
}

// cellKey orders cells as HBase does: by table, row, family, qualifier, then newest version first.
func cellKey(dst []byte, table string, row, family, qualifier []byte, ts int64) []byte {
	dst = append(dst, spaceCell)
	dst = sinks.AppendComponent(dst, table)
	dst = sinks.AppendComponent(dst, string(row))
	dst = sinks.AppendComponent(dst, string(family))
	dst = sinks.AppendComponent(dst, string(qualifier))
	return binary.BigEndian.AppendUint64(dst, math.MaxUint64-uint64(ts))
}

func rowPrefix(table string, row []byte) []byte {
	return sinks.AppendComponent(sinks.AppendComponent([]byte{spaceCell}, table), string(row))
}

func parseCellKey(k []byte) (sinks.Cell, error) {
	var c sinks.Cell
	if len(k) < 1 || k[0] != spaceCell {
		return c, errors.New("cellstore: not a cell key")
	}
	var (
		parts [4]string
		rest  = k[1:]
		err   error
	)
	for i := range parts {
		if parts[i], rest, err = sinks.ReadComponent(rest); err != nil {
			return c, err
		}
	}
	if len(rest) != 8 {
		return c, errors.New("cellstore: cell key without timestamp")
	}
	c.Table, c.Row, c.Family, c.Qualifier = parts[0], []byte(parts[1]), []byte(parts[2]), []byte(parts[3])
	c.Timestamp = int64(math.MaxUint64 - binary.BigEndian.Uint64(rest))
	return c, nil
}

// ErrNoSuchTable and ErrNoSuchFamily are the permanent failures HBase reports as TableNotFound and
// NoSuchColumnFamily; ErrCellTooLarge mirrors its maximum cell size.
var (
	ErrNoSuchTable  = errors.New("no such table")
	ErrNoSuchFamily = errors.New("no such column family")
	ErrCellTooLarge = errors.New("cell too large")
)

// Write puts cells, as sinks.Store requires: each lands or is reported; unknown tables and
// families and oversized cells fail permanently. A Put of an existing version replaces it; versions
// past the family's limit are removed, oldest first.
func (s *Store) Write(ctx context.Context, cells []sinks.Cell) ([]sinks.CellError, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock() // one writer at a time keeps version pruning consistent
	defer s.mu.Unlock()
	var (
		failed []sinks.CellError
		batch  leveldb.Batch
		key    []byte
		cols   = map[string]bool{}
	)
	for i := range cells {
		c := &cells[i]
		fams, ok := s.tables[c.Table]
		switch {
		case !ok:
			failed = append(failed, sinks.CellError{Index: i, Permanent: true, Err: fmt.Errorf("%w: %q", ErrNoSuchTable, c.Table)})
			continue
		case fams[string(c.Family)] == 0:
			failed = append(failed, sinks.CellError{Index: i, Permanent: true, Err: fmt.Errorf("%w: %q in table %q", ErrNoSuchFamily, c.Family, c.Table)})
			continue
		case len(c.Value) > s.MaxCellSize:
			failed = append(failed, sinks.CellError{Index: i, Permanent: true, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrCellTooLarge, len(c.Value), s.MaxCellSize)})
			continue
		}
		key = cellKey(key[:0], c.Table, c.Row, c.Family, c.Qualifier, c.Timestamp)
		batch.Put(key, c.Value)
		cols[string(key[:len(key)-8])] = true
	}
	if err := s.db.Write(&batch, &opt.WriteOptions{Sync: false}); err != nil {
		return nil, fmt.Errorf("cellstore: write: %w", err)
	}
	// Prune each touched column to its family's version limit.
	var prune leveldb.Batch
	for col := range cols {
		c, err := parseCellKey(append([]byte(col), make([]byte, 8)...))
		if err != nil {
			return nil, err
		}
		limit := s.tables[c.Table][string(c.Family)]
		it := s.db.NewIterator(util.BytesPrefix([]byte(col)), nil)
		n := 0
		for it.Next() {
			if len(it.Key()) != len(col)+8 {
				continue // a longer qualifier sharing the prefix cannot happen: components are terminated
			}
			n++
			if n > limit {
				prune.Delete(bytes.Clone(it.Key()))
			}
		}
		it.Release()
	}
	if prune.Len() > 0 {
		if err := s.db.Write(&prune, nil); err != nil {
			return nil, fmt.Errorf("cellstore: prune versions: %w", err)
		}
	}
	return failed, nil
}

// Scan implements sinks.Reader.
func (s *Store) Scan(ctx context.Context, sc sinks.ScanSpec, fn func(row []byte, cells []sinks.Cell) bool) error {
	if _, ok := s.Families(sc.Table); !ok {
		return fmt.Errorf("cellstore: scan: %w: %q", ErrNoSuchTable, sc.Table)
	}
	start, stop := sc.Start, sc.Stop
	if sc.Prefix != nil {
		start, stop = sc.Prefix, prefixEnd(sc.Prefix)
	}
	tablePrefix := sinks.AppendComponent([]byte{spaceCell}, sc.Table)
	r := util.BytesPrefix(tablePrefix)
	if start != nil {
		r.Start = rowPrefix(sc.Table, start)
	}
	if stop != nil {
		r.Limit = rowPrefix(sc.Table, stop)
	}
	maxV := max(sc.MaxVersions, 1)
	it := s.db.NewIterator(r, nil)
	defer it.Release()
	var (
		row   []byte
		cells []sinks.Cell
		rows  int
	)
	// emit hands over the gathered row: cells in HBase order (by column, newest version first), at
	// most maxV versions per column.
	emit := func() bool {
		if row == nil {
			return true
		}
		if sc.Reversed {
			slices.Reverse(cells)
		}
		kept := cells[:0]
		for i, c := range cells {
			n := 1
			for j := i - 1; j >= 0 && n <= maxV && sameColumn(&cells[j], &c); j-- {
				n++
			}
			if n <= maxV {
				kept = append(kept, c)
			}
		}
		rows++
		ok := fn(row, kept)
		row, cells = nil, nil
		return ok && (sc.Limit == 0 || rows < sc.Limit)
	}
	var more bool
	if sc.Reversed {
		more = it.Last()
	} else {
		more = it.First()
	}
	for ; more; more = next(it, sc.Reversed) {
		if err := ctx.Err(); err != nil {
			return err
		}
		c, err := parseCellKey(it.Key())
		if err != nil {
			return err
		}
		if sc.Family != "" && string(c.Family) != sc.Family {
			continue
		}
		if !bytes.Equal(c.Row, row) {
			if !emit() {
				return nil
			}
			row = c.Row
		}
		c.Value = bytes.Clone(it.Value())
		cells = append(cells, c)
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("cellstore: scan %q: %w", sc.Table, err)
	}
	emit()
	return nil
}

func next(it iterator.Iterator, reversed bool) bool {
	if reversed {
		return it.Prev()
	}
	return it.Next()
}

func sameColumn(a, b *sinks.Cell) bool {
	return bytes.Equal(a.Family, b.Family) && bytes.Equal(a.Qualifier, b.Qualifier)
}

func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
