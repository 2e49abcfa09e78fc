package localtable

import (
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/util"
)

var _ storage.Storage = (*Table)(nil)

func open(t *testing.T, path string, flush int) *Table {
	t.Helper()
	tb, err := Open(path, flush)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func get(t *testing.T, tb *Table, key string) string {
	t.Helper()
	v, err := tb.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return "<nil>"
	}
	return string(v)
}

func keys(t *testing.T, tb *Table) []string {
	t.Helper()
	it, err := tb.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Release()
	var ks []string
	for it.Next() {
		v, _ := it.Value()
		ks = append(ks, string(it.Key())+"="+string(v))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestReadsSeeHeldWrites: a write is visible at once, before and after it reaches LevelDB, and a
// delete hides a value LevelDB still has.
func TestReadsSeeHeldWrites(t *testing.T) {
	tb := open(t, t.TempDir(), 0)
	defer tb.Close()
	buf := []byte("v1")
	if err := tb.Set("a", buf); err != nil {
		t.Fatal(err)
	}
	buf[1] = '9' // the caller reuses its buffer
	if got := get(t, tb, "a"); got != "v1" {
		t.Fatalf("a = %s before flush, want v1", got)
	}
	if err := tb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := tb.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, tb, "a"); got != "<nil>" {
		t.Fatalf("a = %s after delete, want nothing", got)
	}
	if ok, _ := tb.Has("a"); ok {
		t.Fatal("Has(a) after delete")
	}
	if err := tb.Set("b", nil); err != nil {
		t.Fatal(err)
	}
	if ok, _ := tb.Has("b"); !ok {
		t.Fatal("an empty value is a value")
	}
}

// TestCloseKeepsWritesAndOffset: what a clean stop leaves is read back by the table and by goka's
// own LevelDB storage, offset included, and the offset is never in an iteration.
func TestCloseKeepsWritesAndOffset(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "table.3")
	tb := open(t, dir, 0)
	for i := range 5 {
		if err := tb.Set(fmt.Sprintf("k%d", i), []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Delete("k2"); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetOffset(41); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get("k1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}

	tb = open(t, dir, 0)
	if off, err := tb.GetOffset(-2); err != nil || off != 41 {
		t.Fatalf("offset after reopen = %d, %v; want 41", off, err)
	}
	if got := fmt.Sprint(keys(t, tb)); got != "[k0=a k1=b k3=d k4=e]" {
		t.Fatalf("keys after reopen: %s", got)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := leveldb.OpenFile(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := storage.New(db)
	if off, err := gs.GetOffset(-2); err != nil || off != 41 {
		t.Fatalf("goka's storage reads offset %d, %v; want 41", off, err)
	}
	if v, _ := gs.Get("k4"); string(v) != "e" {
		t.Fatalf("goka's storage reads k4 = %q", v)
	}
	db.Close()
}

// TestBatchesBoundMemory: past the flush size, writes go to LevelDB without a Flush call; an
// offset never reaches LevelDB ahead of the writes before it.
func TestBatchesBoundMemory(t *testing.T) {
	dir := t.TempDir()
	tb := open(t, dir, 1024)
	if off, _ := tb.GetOffset(-2); off != -2 {
		t.Fatalf("offset of a new table = %d, want the default", off)
	}
	for i := range 200 {
		if err := tb.Set(fmt.Sprintf("key-%03d", i), make([]byte, 20)); err != nil {
			t.Fatal(err)
		}
		if err := tb.SetOffset(int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if tb.bytes >= 1024 {
		t.Fatalf("%d bytes held, over the flush size", tb.bytes)
	}
	// LevelDB's offset never runs ahead of the writes it covers (writes ahead of it are harmless:
	// a recovery from it applies them again).
	raw, err := tb.db.Get([]byte(offsetKey), nil)
	if err != nil {
		t.Fatalf("nothing reached LevelDB past the flush size: %v", err)
	}
	var stored int
	fmt.Sscan(string(raw), &stored)
	for i := 0; i <= stored; i++ {
		if _, err := tb.db.Get(fmt.Appendf(nil, "key-%03d", i), nil); err != nil {
			t.Fatalf("LevelDB has offset %d without write %d: %v", stored, i, err)
		}
	}
	if n := len(keys(t, tb)); n != 200 {
		t.Fatalf("iteration gives %d keys, want 200", n)
	}
	tb.Close()
}

// TestRangeIteration: a range and a prefix, over held and written keys.
func TestRangeIteration(t *testing.T) {
	tb := open(t, t.TempDir(), 0)
	defer tb.Close()
	for _, k := range []string{"a1", "a2", "b1", "b2", "c1"} {
		tb.Set(k, []byte("x"))
		if k == "b1" {
			tb.Flush()
		}
	}
	tb.SetOffset(7)
	collect := func(it storage.Iterator, err error) []string {
		if err != nil {
			t.Fatal(err)
		}
		defer it.Release()
		var ks []string
		for it.Next() {
			ks = append(ks, string(it.Key()))
		}
		return ks
	}
	if got := fmt.Sprint(collect(tb.IteratorWithRange([]byte("a2"), []byte("c1")))); got != "[a2 b1 b2]" {
		t.Fatalf("range [a2, c1): %s", got)
	}
	if got := fmt.Sprint(collect(tb.IteratorWithRange([]byte("b"), nil))); got != "[b1 b2]" {
		t.Fatalf("prefix b: %s", got)
	}
	if got := fmt.Sprint(collect(tb.IteratorWithRange([]byte("_"), nil))); got != "[]" {
		t.Fatalf("prefix _ (the offset key's): %s", got)
	}
}

// TestBytesFollowsTheData: the size estimate counts held writes, then LevelDB's files once they
// are flushed (and compacted out of the log), and a closed table says so.
func TestBytesFollowsTheData(t *testing.T) {
	tb := open(t, filepath.Join(t.TempDir(), "t"), 16<<20)
	empty, err := tb.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		value := make([]byte, 1000)
		rand.Read(value) // LevelDB compresses: random bytes stay their size
		if err := tb.Set(fmt.Sprintf("k%05d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	held, err := tb.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if held < empty+2_000_000 {
		t.Fatalf("%d bytes after 2 MB of writes (empty: %d)", held, empty)
	}
	if err := tb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := tb.db.CompactRange(util.Range{}); err != nil {
		t.Fatal(err)
	}
	onDisk, err := tb.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if onDisk < 1<<20 {
		t.Fatalf("%d bytes on disk after 2 MB of writes were flushed and compacted", onDisk)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Bytes(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Bytes of a closed table: %v, want ErrClosed", err)
	}
}
