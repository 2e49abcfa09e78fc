package tables

import (
	"slices"
	"testing"
)

// TestVersionsAtAndPrune: the version in force at any time, a same-time version replacing the
// first, and pruning that keeps everything a lookup at or after the horizon can reach.
func TestVersionsAtAndPrune(t *testing.T) {
	v := NewVersions()
	v.Put("a", 10, "a10", false, 0)
	v.Put("a", 30, "a30", false, 0)
	v.Put("a", 20, "a20", false, 0)
	v.Put("a", 20, "a20b", false, 0) // the later record of one time wins
	v.Put("a", 40, nil, true, 0)
	v.Put("b", 5, "b5", false, 0)
	v.Put("c", 1, "c1", false, 0)
	v.Put("c", 2, nil, true, 0)
	if v.Len() != 7 || v.Newest() != 40 {
		t.Fatalf("len %d newest %d", v.Len(), v.Newest())
	}
	at := func(key string, t int64) any {
		x, ok := v.At(key, t)
		if !ok {
			return "-"
		}
		return x
	}
	for _, c := range []struct {
		key  string
		t    int64
		want any
	}{{"a", 9, "-"}, {"a", 10, "a10"}, {"a", 19, "a10"}, {"a", 20, "a20b"}, {"a", 35, "a30"}, {"a", 40, "-"}, {"a", 99, "-"},
		{"b", 4, "-"}, {"b", 1 << 40, "b5"}, {"c", 1, "c1"}, {"c", 2, "-"}, {"z", 1, "-"}} {
		if got := at(c.key, c.t); got != c.want {
			t.Errorf("At(%s, %d) = %v, want %v", c.key, c.t, got, c.want)
		}
	}
	gone := v.Prune(25)
	slices.SortFunc(gone, func(x, y Pruned) int {
		if x.Key != y.Key {
			return map[bool]int{true: -1, false: 1}[x.Key < y.Key]
		}
		return int(x.From - y.From)
	})
	want := []Pruned{{"a", 10, 0}, {"c", 1, 0}, {"c", 2, 0}}
	if !slices.Equal(gone, want) {
		t.Fatalf("pruned %v, want %v", gone, want)
	}
	// Every lookup at or after the horizon answers as before.
	for _, c := range []struct {
		key  string
		t    int64
		want any
	}{{"a", 25, "a20b"}, {"a", 30, "a30"}, {"a", 40, "-"}, {"b", 25, "b5"}, {"c", 25, "-"}} {
		if got := at(c.key, c.t); got != c.want {
			t.Errorf("after prune: At(%s, %d) = %v, want %v", c.key, c.t, got, c.want)
		}
	}
	if v.Len() != 4 {
		t.Fatalf("len %d after prune, want 4", v.Len())
	}
}

// TestSavedEncoding: the versions topic's keys and values read back as written.
func TestSavedEncoding(t *testing.T) {
	for _, key := range []string{"", "d1", string(make([]byte, 300))} {
		k, from, err := decodeVersionKey(versionKey(key, -5))
		if err != nil || k != key || from != -5 {
			t.Fatalf("key %q: got %q %d %v", key, k, from, err)
		}
	}
	if _, _, err := decodeVersionKey([]byte{5, 'a'}); err == nil {
		t.Fatal("a short key decoded")
	}
	for _, s := range []saved{{partition: 3, offset: 1 << 40, value: []byte("x")}, {partition: 0, offset: 0, deleted: true}} {
		got, err := decodeSaved(encodeSaved(s))
		if err != nil || got.partition != s.partition || got.offset != s.offset || got.deleted != s.deleted || string(got.value) != string(s.value) {
			t.Fatalf("%+v read back as %+v, %v", s, got, err)
		}
	}
	if _, err := decodeSaved([]byte{9, 0}); err == nil {
		t.Fatal("an unknown format decoded")
	}
}
