// Package localtable is the processor's local copy of a partition of its group table: goka's
// storage.Storage on LevelDB, written in batches.
//
// goka writes its local table one LevelDB Put at a time, and stores the changelog offset with
// another Put after every acknowledged write: two journal writes per event, a fifth of the
// processor's CPU, and most of the time of a restore, where every changelog record is a Put. The
// local table needs no durability of its own: after a run that did not end cleanly the processor
// discards it and rebuilds it from the changelog (package processors), which is the one copy that
// is a consistent prefix of the partition's history. So writes here go to memory and reach
// LevelDB in batches (one journal write for thousands of keys), together with the offset they
// bring the table to; reads see them at once, and Close writes what is left.
package localtable

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/iterator"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// offsetKey is where goka's LevelDB storage keeps the table's changelog offset; the same key keeps
// folders written by either readable by the other.
const offsetKey = "__offset"

// DefaultFlushBytes is how many bytes of writes a table holds before it writes them to LevelDB.
const DefaultFlushBytes = 4 << 20

// ErrClosed is returned by every operation on a closed table.
var ErrClosed = errors.New("local table is closed")

// Table is one partition's local table. It is safe for concurrent use.
type Table struct {
	path       string
	flushBytes int

	mu      sync.Mutex
	db      *leveldb.DB
	pending map[string][]byte // nil: deleted
	bytes   int               // size of pending, keys and values
	offset  int64             // changelog offset the table is at; 0 until set or read
	dirtyOf bool              // offset changed since the last flush
	closed  bool
}

// Open opens (creating if needed) the LevelDB folder at path. flushBytes bounds the writes held in
// memory (0: DefaultFlushBytes).
func Open(path string, flushBytes int) (*Table, error) {
	if flushBytes <= 0 {
		flushBytes = DefaultFlushBytes
	}
	db, err := leveldb.OpenFile(path, &opt.Options{
		// Batches of a few MiB: a larger memtable takes them without a compaction for each.
		WriteBuffer: 2 * flushBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("local table %s: %w", path, err)
	}
	return &Table{path: path, flushBytes: flushBytes, db: db, pending: map[string][]byte{}}, nil
}

// Builder is a goka storage.Builder of tables under folder, one per topic partition, in the
// folders goka's own LevelDB builder uses.
func Builder(folder string, flushBytes int) storage.Builder {
	return func(topic string, partition int32) (storage.Storage, error) {
		return Open(filepath.Join(folder, fmt.Sprintf("%s.%d", topic, partition)), flushBytes)
	}
}

// Open implements storage.Storage; the table is open from the start.
func (t *Table) Open() error { return nil }

// Close writes the held writes and the offset, and closes LevelDB.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	ferr := t.flushLocked()
	t.closed = true
	cerr := t.db.Close()
	if ferr != nil {
		return ferr
	}
	if cerr != nil {
		return fmt.Errorf("local table %s: close: %w", t.path, cerr)
	}
	return nil
}

// Has implements storage.Storage.
func (t *Table) Has(key string) (bool, error) {
	v, err := t.Get(key)
	return v != nil, err
}

// Get implements storage.Storage: nil when the key has no value.
func (t *Table) Get(key string) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if v, ok := t.pending[key]; ok {
		return v, nil
	}
	v, err := t.db.Get([]byte(key), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local table %s: get %q: %w", t.path, key, err)
	}
	return v, nil
}

// Set implements storage.Storage. The value is copied: callers may reuse it.
func (t *Table) Set(key string, value []byte) error {
	v := make([]byte, len(value)) // never nil: nil marks a delete
	copy(v, value)
	return t.put(key, v)
}

// Delete implements storage.Storage.
func (t *Table) Delete(key string) error { return t.put(key, nil) }

func (t *Table) put(key string, value []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if old, ok := t.pending[key]; ok {
		t.bytes -= len(key) + len(old)
	}
	t.pending[key] = value
	t.bytes += len(key) + len(value)
	if t.bytes >= t.flushBytes {
		return t.flushLocked()
	}
	return nil
}

// GetOffset implements storage.Storage: the offset last set, or the one stored, or def.
func (t *Table) GetOffset(def int64) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, ErrClosed
	}
	if t.offset != 0 {
		return t.offset, nil
	}
	raw, err := t.db.Get([]byte(offsetKey), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return def, nil
	}
	if err != nil {
		return 0, fmt.Errorf("local table %s: read offset: %w", t.path, err)
	}
	off, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("local table %s: stored offset %q: %w", t.path, raw, err)
	}
	return off, nil
}

// SetOffset implements storage.Storage. The offset is stored with the next batch of writes, so
// that LevelDB never holds an offset ahead of the writes it covers.
func (t *Table) SetOffset(offset int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.offset, t.dirtyOf = offset, true
	return nil
}

// MarkRecovered implements storage.Storage: the restored table goes to LevelDB.
func (t *Table) MarkRecovered() error { return t.Flush() }

// Flush writes the held writes and the offset to LevelDB in one batch.
func (t *Table) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	return t.flushLocked()
}

func (t *Table) flushLocked() error {
	if len(t.pending) == 0 && !t.dirtyOf {
		return nil
	}
	b := new(leveldb.Batch)
	for k, v := range t.pending {
		if v == nil {
			b.Delete([]byte(k))
		} else {
			b.Put([]byte(k), v)
		}
	}
	if t.dirtyOf {
		b.Put([]byte(offsetKey), strconv.AppendInt(nil, t.offset, 10))
	}
	if err := t.db.Write(b, nil); err != nil {
		return fmt.Errorf("local table %s: write %d keys: %w", t.path, len(t.pending), err)
	}
	clear(t.pending)
	t.bytes, t.dirtyOf = 0, false
	return nil
}

// allKeys ends a range of every key: SizeOf takes a missing limit as the empty key, not as the end.
var allKeys = bytes.Repeat([]byte{0xff}, 64)

// Bytes is about how many bytes the table takes: LevelDB's estimate of its table files (deleted
// keys count until a compaction drops them; its memtable, up to twice flushBytes, does not), plus
// the writes held in memory. It reads no data.
func (t *Table) Bytes() (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, ErrClosed
	}
	sizes, err := t.db.SizeOf([]util.Range{{Limit: allKeys}})
	if err != nil {
		return 0, fmt.Errorf("local table %s: size: %w", t.path, err)
	}
	return sizes.Sum() + int64(t.bytes), nil
}

// Iterator implements storage.Storage: every key and value but the offset, in key order, as of
// the call.
func (t *Table) Iterator() (storage.Iterator, error) { return t.IteratorWithRange(nil, nil) }

// IteratorWithRange implements storage.Storage: keys in [start, limit), or with prefix start when
// limit is empty.
func (t *Table) IteratorWithRange(start, limit []byte) (storage.Iterator, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if err := t.flushLocked(); err != nil {
		return nil, err
	}
	var r *util.Range
	switch {
	case len(limit) > 0:
		r = &util.Range{Start: start, Limit: limit}
	case len(start) > 0:
		r = util.BytesPrefix(start)
	}
	return &iter{it: t.db.NewIterator(r, &opt.ReadOptions{DontFillCache: true})}, nil
}

// iter skips the offset key.
type iter struct{ it iterator.Iterator }

func (i *iter) Next() bool {
	for i.it.Next() {
		if string(i.it.Key()) != offsetKey {
			return true
		}
	}
	return false
}

func (i *iter) Seek(key []byte) bool {
	if !i.it.Seek(key) {
		return false
	}
	if string(i.it.Key()) == offsetKey {
		return i.Next()
	}
	return true
}

func (i *iter) Err() error             { return i.it.Error() }
func (i *iter) Key() []byte            { return i.it.Key() }
func (i *iter) Value() ([]byte, error) { return i.it.Value(), nil }
func (i *iter) Release()               { i.it.Release() }
