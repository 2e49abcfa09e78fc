// Package memtable is goka's storage.Storage in memory: one partition's table for the engine when
// it runs without Kafka (the test driver, backfill).
package memtable

import (
	"bytes"
	"iter"
	"slices"

	"github.com/lovoo/goka/storage"
)

// Table is a goka storage in memory, for one partition's table. goka's own keeps its keys sorted
// on every insert, which is quadratic for the tens of thousands of entities a test sends; this one
// sorts when it is iterated, which the engine does only when it takes a partition over.
type Table struct {
	m         map[string][]byte
	offset    int64
	recovered bool
}

// New returns an empty table.
func New() *Table { return &Table{m: map[string][]byte{}, offset: -1} }

// Keys yields the table's keys, in no order.
func (s *Table) Keys() iter.Seq[string] {
	return func(yield func(string) bool) {
		for k := range s.m {
			if !yield(k) {
				return
			}
		}
	}
}

func (s *Table) Has(key string) (bool, error) { _, ok := s.m[key]; return ok, nil }

// Get implements storage.Storage. It returns a copy: the engine's decoders alias what they read.
func (s *Table) Get(key string) ([]byte, error) {
	v, ok := s.m[key]
	if !ok {
		return nil, nil
	}
	return bytes.Clone(v), nil
}

func (s *Table) Set(key string, value []byte) error { s.m[key] = bytes.Clone(value); return nil }
func (s *Table) Delete(key string) error            { delete(s.m, key); return nil }
func (s *Table) MarkRecovered() error               { s.recovered = true; return nil }
func (s *Table) Recovered() bool                    { return s.recovered }
func (s *Table) SetOffset(o int64) error            { s.offset = o; return nil }
func (s *Table) Open() error                        { return nil }
func (s *Table) Close() error                       { return nil }

func (s *Table) GetOffset(def int64) (int64, error) {
	if s.offset < 0 {
		return def, nil
	}
	return s.offset, nil
}

func (s *Table) Iterator() (storage.Iterator, error) { return s.IteratorWithRange(nil, nil) }

func (s *Table) IteratorWithRange(start, limit []byte) (storage.Iterator, error) {
	it := &memIter{i: -1}
	for k, v := range s.m {
		if (start == nil || k >= string(start)) && (limit == nil || k < string(limit)) {
			it.keys = append(it.keys, k)
			it.vals = append(it.vals, v)
		}
	}
	order := make([]int, len(it.keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare([]byte(it.keys[a]), []byte(it.keys[b])) })
	keys, vals := make([]string, len(order)), make([][]byte, len(order))
	for i, o := range order {
		keys[i], vals[i] = it.keys[o], it.vals[o]
	}
	it.keys, it.vals = keys, vals
	return it, nil
}

type memIter struct {
	i    int
	keys []string
	vals [][]byte
}

func (it *memIter) Next() bool             { it.i++; return it.i < len(it.keys) }
func (it *memIter) Err() error             { return nil }
func (it *memIter) Key() []byte            { return []byte(it.keys[it.i]) }
func (it *memIter) Value() ([]byte, error) { return bytes.Clone(it.vals[it.i]), nil }
func (it *memIter) Release()               {}
func (it *memIter) Seek(key []byte) bool {
	for it.i = 0; it.i < len(it.keys); it.i++ {
		if it.keys[it.i] >= string(key) {
			return true
		}
	}
	return false
}
