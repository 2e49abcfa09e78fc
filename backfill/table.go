package backfill

import (
	"iter"

	"github.com/lovoo/goka/storage"

	"github.com/abacus-stream/abacus/internal/memtable"
	"github.com/abacus-stream/abacus/state"
)

// table is a partition's table as backfill's engine sees it. The live path encodes every entity
// it writes, for its changelog; backfill has none, so it keeps the entities written as they are
// and encodes one only when it is read as bytes (a checkpoint, or the engine reading an entity its
// cache forgot), or when more than maxDecoded wait.
type table struct {
	*memtable.Table
	objs map[string]*state.Entity
}

// maxDecoded bounds the entities a table keeps decoded: they take more memory than their bytes.
const maxDecoded = 50_000

func newTable() *table { return &table{Table: memtable.New(), objs: map[string]*state.Entity{}} }

// value is what goka's Context.Value gives: a value the caller may change.
func (t *table) value(key string) (any, error) {
	if e, ok := t.objs[key]; ok {
		return e.Clone(), nil
	}
	b, _ := t.Table.Get(key)
	if b == nil {
		return nil, nil
	}
	return state.Codec{}.Decode(b)
}

// setValue is goka's Context.SetValue. An entity must not change once written (the engine's
// own cache holds it too).
func (t *table) setValue(key string, v any) error {
	if e, ok := v.(*state.Entity); ok {
		if len(t.objs) >= maxDecoded {
			if err := t.flush(); err != nil {
				return err
			}
		}
		t.objs[key] = e
		return t.Table.Delete(key)
	}
	b, err := state.Codec{}.Encode(v)
	if err != nil {
		return err
	}
	return t.Set(key, b)
}

// flush encodes every entity kept decoded.
func (t *table) flush() error {
	for k, e := range t.objs {
		b, err := state.Codec{}.Encode(e)
		if err != nil {
			return err
		}
		if err := t.Table.Set(k, b); err != nil {
			return err
		}
	}
	clear(t.objs)
	return nil
}

func (t *table) Get(key string) ([]byte, error) {
	if e, ok := t.objs[key]; ok {
		b, err := state.Codec{}.Encode(e)
		if err != nil {
			return nil, err
		}
		delete(t.objs, key)
		return b, t.Table.Set(key, b)
	}
	return t.Table.Get(key)
}

func (t *table) Has(key string) (bool, error) {
	if _, ok := t.objs[key]; ok {
		return true, nil
	}
	return t.Table.Has(key)
}

func (t *table) Set(key string, value []byte) error {
	delete(t.objs, key)
	return t.Table.Set(key, value)
}

func (t *table) Delete(key string) error {
	delete(t.objs, key)
	return t.Table.Delete(key)
}

// Keys yields every key, encoding the entities kept decoded first.
func (t *table) Keys() iter.Seq[string] {
	if err := t.flush(); err != nil {
		return func(func(string) bool) {}
	}
	return t.Table.Keys()
}

func (t *table) Iterator() (storage.Iterator, error) { return t.IteratorWithRange(nil, nil) }

func (t *table) IteratorWithRange(start, limit []byte) (storage.Iterator, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	return t.Table.IteratorWithRange(start, limit)
}

var _ storage.Storage = (*table)(nil)
