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
	"strconv"
	"strings"
	"sync"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
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
	// attrs maps a table to its attributes (schema.TableLayout.Attributes).
	attrs map[string]map[string]string
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
	s := &Store{db: db, tables: map[string]map[string]int{}, attrs: map[string]map[string]string{}, MaxCellSize: 10 << 20}
	if err := s.loadSchemas(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// Key spaces: schema records (families), table attributes, and cells.
const (
	spaceSchema = 's'
	spaceAttrs  = 'a'
	spaceCell   = 'c'
)

var _ store.Store = (*Store)(nil)

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
		val = schema.AppendComponent(val, f)
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

// EnsureTable implements store.Tables: a missing table is created with the layout's family and
// attributes; an existing one must match the layout.
func (s *Store) EnsureTable(ctx context.Context, l schema.TableLayout) error {
	l.EnsureDefaults()
	if err := l.Validate(); err != nil {
		return fmt.Errorf("cellstore: %w", err)
	}
	if _, ok := s.Families(l.Name); ok {
		return s.VerifyTable(ctx, l)
	}
	if err := s.CreateTable(l.Name, map[string]int{l.Family: l.Versions}); err != nil {
		return err
	}
	attrs := l.Attributes()
	for k, v := range l.FamilySettings() {
		attrs[familyAttr+l.Family+"."+k] = v
	}
	return s.setAttributes(l.Name, attrs)
}

// VerifyTable implements store.Tables.
func (s *Store) VerifyTable(_ context.Context, l schema.TableLayout) error {
	l.EnsureDefaults()
	fams, ok := s.Families(l.Name)
	if !ok {
		return fmt.Errorf("cellstore: table %s: %w", l.Name, store.ErrNoSuchTable)
	}
	names := make([]string, 0, len(fams))
	for f := range fams {
		names = append(names, f)
	}
	slices.Sort(names)
	s.mu.RLock()
	attrs := s.attrs[l.Name]
	s.mu.RUnlock()
	if err := l.CheckExisting(attrs, names); err != nil {
		return fmt.Errorf("cellstore: %w", err)
	}
	return nil
}

// SaltBuckets implements store.Tables.
func (s *Store) SaltBuckets(_ context.Context, table string) (int, error) {
	if _, ok := s.Families(table); !ok {
		return 0, fmt.Errorf("cellstore: table %s: %w", table, store.ErrNoSuchTable)
	}
	s.mu.RLock()
	attrs := s.attrs[table]
	s.mu.RUnlock()
	n, err := schema.SaltBucketsOf(table, attrs)
	if err != nil {
		return 0, fmt.Errorf("cellstore: %w", err)
	}
	return n, nil
}

// familyAttr prefixes the family settings kept among a table's attributes (family.<name>.<setting>).
const familyAttr = "family."

// FamilySettings implements store.Tables: the settings the table was created with (a table of an
// earlier version of the store has its versions alone).
func (s *Store) FamilySettings(_ context.Context, table, family string) (map[string]string, error) {
	fams, ok := s.Families(table)
	if !ok {
		return nil, fmt.Errorf("cellstore: table %s: %w", table, store.ErrNoSuchTable)
	}
	v, ok := fams[family]
	if !ok {
		return nil, fmt.Errorf("cellstore: table %s has no family %s", table, family)
	}
	out := map[string]string{schema.SettingVersions: strconv.Itoa(v)}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, val := range s.attrs[table] {
		if name, ok := strings.CutPrefix(k, familyAttr+family+"."); ok {
			out[name] = val
		}
	}
	return out, nil
}

func (s *Store) setAttributes(table string, attrs map[string]string) error {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var val []byte
	for _, k := range keys {
		val = schema.AppendComponent(schema.AppendComponent(val, k), attrs[k])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.db.Put(append([]byte{spaceAttrs}, table...), val, nil); err != nil {
		return fmt.Errorf("cellstore: table %q attributes: %w", table, err)
	}
	s.attrs[table] = attrs
	return nil
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
			f, rest, err := schema.ReadComponent(b)
			if err != nil || len(rest) < 4 {
				return fmt.Errorf("cellstore: schema of table %q is corrupt", table)
			}
			fams[f] = int(binary.BigEndian.Uint32(rest))
			b = rest[4:]
		}
		s.tables[table] = fams
	}
	if err := it.Error(); err != nil {
		return err
	}
	at := s.db.NewIterator(util.BytesPrefix([]byte{spaceAttrs}), nil)
	defer at.Release()
	for at.Next() {
		table := string(at.Key()[1:])
		attrs := map[string]string{}
		for b := at.Value(); len(b) > 0; {
			k, rest, err := schema.ReadComponent(b)
			if err != nil {
				return fmt.Errorf("cellstore: attributes of table %q are corrupt", table)
			}
			v, rest, err := schema.ReadComponent(rest)
			if err != nil {
				return fmt.Errorf("cellstore: attributes of table %q are corrupt", table)
			}
			attrs[k], b = v, rest
		}
		s.attrs[table] = attrs
	}
	return at.Error()
}

// cellKey orders cells as HBase does: by table, row, family, qualifier, then newest version first.
func cellKey(dst []byte, table string, row, family, qualifier []byte, ts int64) []byte {
	dst = append(dst, spaceCell)
	dst = schema.AppendComponent(dst, table)
	dst = schema.AppendComponent(dst, string(row))
	dst = schema.AppendComponent(dst, string(family))
	dst = schema.AppendComponent(dst, string(qualifier))
	return binary.BigEndian.AppendUint64(dst, math.MaxUint64-uint64(ts))
}

func rowPrefix(table string, row []byte) []byte {
	return schema.AppendComponent(schema.AppendComponent([]byte{spaceCell}, table), string(row))
}

func parseCellKey(k []byte) (store.Cell, error) {
	var c store.Cell
	if len(k) < 1 || k[0] != spaceCell {
		return c, errors.New("cellstore: not a cell key")
	}
	var (
		parts [4]string
		rest  = k[1:]
		err   error
	)
	for i := range parts {
		if parts[i], rest, err = schema.ReadComponent(rest); err != nil {
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
	ErrNoSuchTable  = store.ErrNoSuchTable
	ErrNoSuchFamily = errors.New("no such column family")
	ErrCellTooLarge = errors.New("cell too large")
)

// Write puts cells, as store.Writer requires: each lands or is reported; unknown tables and
// families and oversized cells fail permanently. A Put of an existing version replaces it; versions
// past the family's limit are removed, oldest first.
func (s *Store) Write(ctx context.Context, cells []store.Cell) ([]store.CellError, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock() // one writer at a time keeps version pruning consistent
	defer s.mu.Unlock()
	var (
		failed []store.CellError
		batch  leveldb.Batch
		key    []byte
		cols   = map[string]bool{}
	)
	for i := range cells {
		c := &cells[i]
		fams, ok := s.tables[c.Table]
		switch {
		case !ok:
			failed = append(failed, store.CellError{Index: i, Permanent: true, Err: fmt.Errorf("%w: %q", ErrNoSuchTable, c.Table)})
			continue
		case fams[string(c.Family)] == 0:
			failed = append(failed, store.CellError{Index: i, Permanent: true, Err: fmt.Errorf("%w: %q in table %q", ErrNoSuchFamily, c.Family, c.Table)})
			continue
		case len(c.Value) > s.MaxCellSize:
			failed = append(failed, store.CellError{Index: i, Permanent: true, Err: fmt.Errorf("%w: %d bytes, limit %d", ErrCellTooLarge, len(c.Value), s.MaxCellSize)})
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

// Scan implements store.Reader.
func (s *Store) Scan(ctx context.Context, sc store.ScanSpec, fn func(row []byte, cells []store.Cell) bool) error {
	if _, ok := s.Families(sc.Table); !ok {
		return fmt.Errorf("cellstore: scan: %w: %q", ErrNoSuchTable, sc.Table)
	}
	if len(sc.Ranges) > 0 && sc.Reversed {
		return fmt.Errorf("cellstore: scan %q: row ranges in a reversed scan", sc.Table)
	}
	start, stop := sc.Start, sc.Stop
	if sc.Prefix != nil {
		start, stop = sc.Prefix, store.PrefixEnd(sc.Prefix)
	}
	tablePrefix := schema.AppendComponent([]byte{spaceCell}, sc.Table)
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
		cells []store.Cell
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
		if !store.InRanges(c.Row, sc.Ranges) {
			continue // a row between the ranges (HBase's filter seeks past them)
		}
		if sc.Family != "" && len(sc.Qualifiers) > 0 && !slices.ContainsFunc(sc.Qualifiers, func(q []byte) bool { return bytes.Equal(q, c.Qualifier) }) {
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

func sameColumn(a, b *store.Cell) bool {
	return bytes.Equal(a.Family, b.Family) && bytes.Equal(a.Qualifier, b.Qualifier)
}
