package state

import (
	"errors"
	"reflect"
	"testing"
)

func sample() *Entity {
	return &Entity{
		StreamTime: 1_767_225_600_000,
		Fences:     []Fence{{Topic: "readings", Partition: 3, Offset: 41}, {Topic: "other", Partition: 0, Offset: 0}},
		Windows: []Window{
			{Set: 0, Start: 1_767_225_600_000, End: 1_767_225_660_000, Revision: 7, LastEmit: 5,
				Aggs: [][]byte{{7}, {1, 2, 3}}},
			{Set: 2, Start: -60_000, End: 0, Revision: 1, Aggs: [][]byte{{}}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, e := range []*Entity{sample(), {}} {
		b := e.Append(nil)
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(e)) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, e)
		}
	}
}

// normalize maps empty slices to nil so DeepEqual compares content.
func normalize(e *Entity) *Entity {
	c := *e
	if len(c.Fences) == 0 {
		c.Fences = nil
	}
	if len(c.Windows) == 0 {
		c.Windows = nil
	}
	for i := range c.Windows {
		for j := range c.Windows[i].Aggs {
			if len(c.Windows[i].Aggs[j]) == 0 {
				c.Windows[i].Aggs[j] = nil
			}
		}
	}
	return &c
}

// TestCompact pins the size of a typical entity: one fence and one window with three small
// accumulators must stay well under what JSON would take.
func TestCompact(t *testing.T) {
	e := &Entity{StreamTime: 1_767_225_600_000, Fences: []Fence{{Topic: "readings", Partition: 3, Offset: 1 << 30}},
		Windows: []Window{{Start: 1_767_225_600_000, End: 1_767_225_660_000, Revision: 100,
			Aggs: [][]byte{{100}, make([]byte, 17), make([]byte, 10)}}}}
	if n := len(e.Append(nil)); n > 90 {
		t.Errorf("typical entity encodes to %d bytes, want at most 90", n)
	}
}

func TestDecodeRejectsCorruption(t *testing.T) {
	b := sample().Append(nil)
	for i := range len(b) {
		if _, err := Decode(b[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: error %v, want ErrCorrupt", i, err)
		}
	}
	bad := append([]byte{9}, b[1:]...)
	if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("unknown version: error %v", err)
	}
	if _, err := Decode(append(b, 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trailing byte: error %v", err)
	}
}

func TestFence(t *testing.T) {
	e := &Entity{}
	if e.Applied("a", 0, 0) {
		t.Fatal("empty entity claims offset 0 applied")
	}
	e.Advance("a", 0, 10)
	e.Advance("a", 1, 3)
	e.Advance("a", 0, 5) // an older offset never lowers the fence
	for _, c := range []struct {
		topic  string
		part   int32
		offset int64
		want   bool
	}{
		{"a", 0, 10, true}, {"a", 0, 0, true}, {"a", 0, 11, false},
		{"a", 1, 3, true}, {"a", 1, 4, false}, {"b", 0, 1, false},
	} {
		if got := e.Applied(c.topic, c.part, c.offset); got != c.want {
			t.Errorf("Applied(%s, %d, %d) = %v, want %v", c.topic, c.part, c.offset, got, c.want)
		}
	}
}
