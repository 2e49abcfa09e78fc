package state

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/abacus-stream/abacus/internal/golden"
)

// goldenLayout is a layout of two sets, one an entity set and one a rollup.
func goldenLayout() Layout {
	return NewLayout([]LayoutSet{
		{Name: "minute", Window: "tumbling 60000", Aggs: []string{"count", "sum"}, Kinds: []string{"count", "sum"}},
		{Name: "all", Window: "tumbling 60000 global", Aggs: []string{"count"}, Kinds: []string{"count"}}})
}

// goldenEntity has every kind of window: an entity's, one with an aggregation absent (added to
// its set while it was open), a contribution to a rollup (keyed), and an owner's final slot.
func goldenEntity() *Entity {
	return &Entity{Layout: goldenLayout().Hash, StreamTime: 1_767_225_700_000,
		Fences: []Fence{{Topic: TopicID("readings"), Partition: 3, Offset: 41, Watermark: 1_767_225_699_000}},
		Windows: []Window{
			{Set: 0, Start: 1_767_225_600_000, End: 1_767_225_660_000, Revision: 4, LastEmit: 1_767_225_655_000, Aggs: [][]byte{{0x04}, {0x01, 0x02}}},
			{Set: 0, Start: 1_767_225_660_000, End: 1_767_225_720_000, Revision: 1, Aggs: [][]byte{{0x01}, nil}, Absent: []int{1}},
			{Set: 1, Start: 1_767_225_600_000, End: 1_767_225_660_000, Revision: 4, Key: "all", Aggs: [][]byte{{0x04}}},
			{Set: 1, Start: 1_767_225_540_000, End: 1_767_225_600_000, Revision: 2, Key: SlotKey(7), Final: true},
		}}
}

// TestGoldenEntity pins the entity encodings: version 2, and version 3 (with pending late
// records), whose bytes are the changelog's and the local table's.
func TestGoldenEntity(t *testing.T) {
	e := goldenEntity()
	golden.Check(t, "entity-v2", "entity state, version 2: fences, windows plain, with an absent aggregation, keyed, final", e.Append(nil))
	e.Pending = []Pending{{Topic: TopicID("readings"), Partition: 3, Offset: 39}}
	golden.Check(t, "entity-v3", "entity state, version 3: the same with a pending late record", e.Append(nil))
	for _, name := range []string{"entity-v2", "entity-v3"} {
		b := golden.Read(t, name)
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got.Append(nil), b) || len(got.Windows) != 4 || !got.Windows[1].IsAbsent(1) || got.Windows[3].Key != SlotKey(7) {
			t.Fatalf("%s decodes as %+v", name, got)
		}
	}
}

// TestGoldenPartition pins the partition record (version 3), and reads one of version 2 as the
// code before it wrote it.
func TestGoldenPartition(t *testing.T) {
	p := &Partition{StreamTime: 1_767_225_700_000, IdleStreamTime: 1_767_225_650_000,
		Origins: []Origin{{Topic: TopicID("readings"), Partition: 3, Watermark: 1_767_225_699_000, LastAdvance: 1_767_225_800_000, Done: 41}},
		Layouts: []Layout{goldenLayout()},
		Graces: []SetGrace{{Set: "minute", Grace: 10_000, FinalThrough: math.MinInt64, FinalAt: math.MinInt64, LiveFrom: math.MinInt64},
			{Set: "all", Grace: 40_000, FinalThrough: 1_767_225_600_000, FinalAt: 1_767_225_690_000, LiveFrom: 1_767_225_300_000}},
		RollupEnds: []SetEnds{{Set: "all", Ends: []int64{1_767_225_650_000, math.MinInt64, 1_767_225_660_000},
			Live: []int64{math.MinInt64, 1_767_225_300_000, math.MinInt64}}},
		Progress: []int64{1_767_225_690_000, math.MinInt64, 1_767_225_700_000}}
	golden.Check(t, "partition-v3", "partition record, version 3: origins, a layout, graces with live-from, rollup ends and progress", p.Append(nil))
	got, err := DecodePartition(golden.Read(t, "partition-v3"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("version 3 decodes as %+v, want %+v", got, p)
	}

	v2, err := DecodePartition(golden.Read(t, "partition-v2"))
	if err != nil {
		t.Fatal(err)
	}
	want := *p
	want.RollupEnds = nil
	want.Graces = []SetGrace{{Set: "minute", Grace: 10_000, FinalThrough: math.MinInt64, FinalAt: math.MinInt64, LiveFrom: math.MinInt64},
		{Set: "all", Grace: 40_000, FinalThrough: 1_767_225_600_000, FinalAt: 1_767_225_690_000, LiveFrom: math.MinInt64}}
	if !reflect.DeepEqual(v2, &want) {
		t.Fatalf("version 2 decodes as %+v, want %+v", v2, &want)
	}
}
