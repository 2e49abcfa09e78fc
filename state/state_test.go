package state

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
)

func sample() *Entity {
	return &Entity{
		Layout:     0xdeadbeef,
		StreamTime: 1_767_225_600_000,
		Fences: []Fence{{Topic: TopicID("readings"), Partition: 3, Offset: 41, Watermark: 1_767_225_600_000},
			{Topic: TopicID("other"), Partition: 0, Offset: 0, Watermark: 1_767_225_000_000}},
		Windows: []Window{
			{Set: 0, Start: 1_767_225_600_000, End: 1_767_225_660_000, Revision: 7, LastEmit: 5,
				Aggs: [][]byte{{7}, {1, 2, 3}}},
			{Set: 2, Start: -60_000, End: 0, Revision: 1, Aggs: [][]byte{{}}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	withDesc := sample()
	l := NewLayout([]LayoutSet{{Name: "m", Window: "tumbling 60000", Aggs: []string{"n"}}})
	withDesc.Layout, withDesc.LayoutDesc = l.Hash, &l
	for _, e := range []*Entity{sample(), {}, withDesc} {
		b := e.Append(nil)
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := got.Described()
		if err != nil || !reflect.DeepEqual(desc, e.LayoutDesc) {
			t.Errorf("layout description read back as %+v (%v), want %+v", desc, err, e.LayoutDesc)
		}
		got.LayoutDesc = desc
		got.Undescribe()
		got.LayoutDesc = desc
		if !reflect.DeepEqual(normalize(got), normalize(e)) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, e)
		}
		v, err := Codec{}.Decode(b)
		if err == nil {
			v.(*Entity).LayoutDesc, _ = v.(*Entity).Described()
			v.(*Entity).layoutRaw = nil
		}
		if err != nil || !reflect.DeepEqual(normalize(v.(*Entity)), normalize(e)) {
			t.Errorf("codec round trip: %+v %v", v, err)
		}
	}
}

// TestReadsVersion1: state written by the previous version (topic names in fences, absolute
// times, no layout) is read, each fence's watermark taken from the entity's stream time.
func TestReadsVersion1(t *testing.T) {
	b := []byte{1}
	b = binary.AppendVarint(b, 5000) // stream time
	b = binary.AppendUvarint(b, 1)   // one fence
	b = binary.AppendUvarint(b, uint64(len("readings")))
	b = append(b, "readings"...)
	b = binary.AppendVarint(b, 3)
	b = binary.AppendVarint(b, 41)
	b = binary.AppendUvarint(b, 1) // one window
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendVarint(b, 4000)
	b = binary.AppendUvarint(b, 1000)
	b = binary.AppendUvarint(b, 2)
	b = binary.AppendVarint(b, 0)
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendUvarint(b, 1)
	b = append(b, 9)
	e, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Entity{StreamTime: 5000, Fences: []Fence{{Topic: TopicID("readings"), Partition: 3, Offset: 41, Watermark: 5000}},
		Windows: []Window{{Set: 1, Start: 4000, End: 5000, Revision: 2, Aggs: [][]byte{{9}}}}}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("version 1 read as %+v", e)
	}
}

func TestPartitionRoundTrip(t *testing.T) {
	l := NewLayout([]LayoutSet{{Name: "minute", Window: "tumbling 60000", Aggs: []string{"count", "max"}, Kinds: []string{"count", "max"}}})
	p := &Partition{StreamTime: 1_767_225_700_000, IdleStreamTime: 1_767_225_600_000,
		Origins: []Origin{{Topic: TopicID("a"), Partition: 2, Watermark: 99, LastAdvance: 1_767_225_601_000, Done: 41}},
		Layouts: []Layout{l}, Graces: []SetGrace{{Set: "minute", Grace: 5000, FinalThrough: 1_767_225_000_000, FinalAt: 1_767_225_600_000}}}
	b := p.Append(nil)
	v, err := Codec{}.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, p) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", v, p)
	}
	if p.AddLayout(l) || !p.AddLayout(NewLayout([]LayoutSet{{Name: "hour"}})) || len(p.Layouts) != 2 {
		t.Fatal("AddLayout kept a duplicate or lost a new layout")
	}
	if o := p.Origin(TopicID("a"), 2); o == nil || o.Watermark != 99 {
		t.Fatal("origin not found")
	}
	for i := range len(b) {
		if _, err := DecodePartition(b[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: error %v, want ErrCorrupt", i, err)
		}
	}
}

// TestReadsPartitionVersion1: a record written before offsets, kinds and graces were recorded is
// read with no done offset (-1), no kinds and no graces.
func TestReadsPartitionVersion1(t *testing.T) {
	b := []byte{'P', 1}
	b = binary.AppendVarint(b, 5000) // stream time
	b = binary.AppendVarint(b, 4000) // idle stream time
	b = binary.AppendUvarint(b, 1)   // one origin
	b = binary.BigEndian.AppendUint32(b, TopicID("a"))
	b = binary.AppendVarint(b, 2)
	b = binary.AppendVarint(b, 4500)
	b = binary.AppendVarint(b, 77)
	b = binary.AppendUvarint(b, 1) // one layout
	b = binary.BigEndian.AppendUint32(b, 9)
	b = (&Layout{Sets: []LayoutSet{{Name: "m", Window: "tumbling 60000", Aggs: []string{"n"}}}}).appendSetList(b)
	p, err := DecodePartition(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Partition{StreamTime: 5000, IdleStreamTime: 4000,
		Origins: []Origin{{Topic: TopicID("a"), Partition: 2, Watermark: 4500, LastAdvance: 77, Done: -1}},
		Layouts: []Layout{{Hash: 9, Sets: []LayoutSet{{Name: "m", Window: "tumbling 60000", Aggs: []string{"n"}}}}}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("version 1 read as %+v", p)
	}
}

// TestPendingRoundTrip: an entity with pending late records is written as version 3 and read
// back with them; without, it keeps the version-2 bytes.
func TestPendingRoundTrip(t *testing.T) {
	e := sample()
	if b := e.Append(nil); b[0] != Version {
		t.Fatalf("entity without pending records written as version %d", b[0])
	}
	e.Pending = []Pending{{Topic: TopicID("readings"), Partition: 3, Offset: 40}, {Topic: TopicID("other"), Partition: 1, Offset: 7}}
	b := e.Append(nil)
	if b[0] != VersionPending {
		t.Fatalf("entity with pending records written as version %d", b[0])
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Pending, e.Pending) || !got.IsPending(TopicID("other"), 1, 7) || got.IsPending(TopicID("other"), 1, 8) {
		t.Fatalf("pending read back as %+v", got.Pending)
	}
	for i := range len(b) {
		if _, err := Decode(b[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: error %v, want ErrCorrupt", i, err)
		}
	}
}

// TestLayoutKindsDescribed: an entity's description of its layout carries the aggregations'
// kinds; a description written before kinds were recorded reads with none.
func TestLayoutKindsDescribed(t *testing.T) {
	l := NewLayout([]LayoutSet{{Name: "m", Window: "tumbling 60000", Aggs: []string{"n", "s"}, Kinds: []string{"count", "sum"}}})
	e := &Entity{Layout: l.Hash, LayoutDesc: &l}
	got, err := Decode(e.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	desc, err := got.Described()
	if err != nil || !reflect.DeepEqual(desc, &l) || desc.Sets[0].Kind(1) != "sum" {
		t.Fatalf("description read back as %+v (%v), want %+v", desc, err, l)
	}
	old := Layout{Hash: 5, Sets: []LayoutSet{{Name: "m", Window: "tumbling 60000", Aggs: []string{"n"}}}}
	got, err = Decode((&Entity{Layout: 5, LayoutDesc: &old}).Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	if desc, err := got.Described(); err != nil || desc.Sets[0].Kind(0) != "" {
		t.Fatalf("a description without kinds read back as %+v (%v)", desc, err)
	}
	if NewLayout(old.Sets).Hash == NewLayout([]LayoutSet{{Name: "m", Window: "tumbling 60000", Aggs: []string{"n"}, Kinds: []string{"count"}}}).Hash {
		t.Fatal("the kinds do not change the layout's hash")
	}
}

// TestLayoutHash: the hash follows the names, windows and order of sets and aggregations.
func TestLayoutHash(t *testing.T) {
	a := NewLayout([]LayoutSet{{Name: "m", Window: "tumbling 60000", Aggs: []string{"count", "max"}}})
	for _, other := range [][]LayoutSet{
		{{Name: "m", Window: "tumbling 60000", Aggs: []string{"max", "count"}}},
		{{Name: "m", Window: "tumbling 30000", Aggs: []string{"count", "max"}}},
		{{Name: "n", Window: "tumbling 60000", Aggs: []string{"count", "max"}}},
		{{Name: "m", Window: "tumbling 60000", Aggs: []string{"count"}}},
	} {
		if NewLayout(other).Hash == a.Hash {
			t.Errorf("layout %+v hashes as %+v", other, a.Sets)
		}
	}
	if NewLayout(a.Sets).Hash != a.Hash {
		t.Error("hash is not stable")
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
// accumulators (count, sum, max) stays within 60 bytes.
func TestCompact(t *testing.T) {
	st := int64(1_767_225_660_000)
	e := &Entity{Layout: 1234567, StreamTime: st, Fences: []Fence{{Topic: TopicID("readings"), Partition: 3, Offset: 1 << 30, Watermark: st}},
		Windows: []Window{{Start: st - 60_000, End: st, Revision: 100,
			Aggs: [][]byte{{100}, make([]byte, 8), make([]byte, 8)}}}}
	if n := len(e.Append(nil)); n > 60 {
		t.Errorf("typical entity encodes to %d bytes, want at most 60", n)
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
	a, b := TopicID("a"), TopicID("b")
	e := &Entity{}
	if e.Applied(a, 0, 0) {
		t.Fatal("empty entity claims offset 0 applied")
	}
	e.Advance(a, 0, 10, 100)
	e.Advance(a, 1, 3, 50)
	e.Advance(a, 0, 5, 90) // an older offset never lowers the fence or the watermark
	if e.Fences[0].Offset != 10 || e.Fences[0].Watermark != 100 {
		t.Fatalf("fence lowered: %+v", e.Fences[0])
	}
	for _, c := range []struct {
		topic  uint32
		part   int32
		offset int64
		want   bool
	}{
		{a, 0, 10, true}, {a, 0, 0, true}, {a, 0, 11, false},
		{a, 1, 3, true}, {a, 1, 4, false}, {b, 0, 1, false},
	} {
		if got := e.Applied(c.topic, c.part, c.offset); got != c.want {
			t.Errorf("Applied(%d, %d, %d) = %v, want %v", c.topic, c.part, c.offset, got, c.want)
		}
	}
}

// TestRollupWindowsRoundTrip: a contribution's rollup key, an owner's slots (final ones without
// accumulators) and a partition's rollup progress survive encoding; a window without a key keeps
// the bytes of version 2 (flags 0); unknown flags are refused, not misread.
func TestRollupWindowsRoundTrip(t *testing.T) {
	e := &Entity{Layout: 7, StreamTime: 1_000_000, Windows: []Window{
		{Set: 1, Start: 960_000, End: 1_020_000, Revision: 3, Key: "eu-west", Aggs: [][]byte{{1}, {2}}},
		{Set: 2, Start: 960_000, End: 1_020_000, Revision: 9, Aggs: [][]byte{{3}}},
		{Set: 2, Start: 960_000, End: 1_020_000, Revision: 4, Key: SlotKey(3), Final: true},
		{Set: 2, Start: 960_000, End: 1_020_000, Revision: 5, Key: SlotKey(11), Aggs: [][]byte{{4}}},
	}}
	got, err := Decode(e.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i := range e.Windows {
		w, g := e.Windows[i], got.Windows[i]
		if w.Key != g.Key || w.Final != g.Final || w.Revision != g.Revision || len(w.Aggs) != len(g.Aggs) {
			t.Fatalf("window %d: %+v, want %+v", i, g, w)
		}
	}
	if p, ok := SlotOf(got.Windows[3].Key); !ok || p != 11 {
		t.Fatalf("SlotOf(%q) = %d, %v", got.Windows[3].Key, p, ok)
	}
	if _, ok := SlotOf("eu-west"); ok {
		t.Fatal("a rollup key read as a slot")
	}
	if i := got.FindKey(2, 960_000, SlotKey(3)); i != 2 {
		t.Fatalf("FindKey = %d", i)
	}
	if i := got.Find(1, 960_000); i != -1 {
		t.Fatalf("Find found the keyed window %d", i)
	}
	plain := &Entity{Layout: 7, StreamTime: 5, Windows: []Window{{Set: 0, Start: 0, End: 60, Aggs: [][]byte{{1}}}}}
	b := plain.Append(nil)
	// The window's flags are the byte before its one-aggregation count: 0, as version 2 wrote.
	if b[len(b)-4] != 0 {
		t.Fatalf("flags of a window without key: %d", b[len(b)-4])
	}
	b[len(b)-4] = 0x40
	if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unknown flags: %v", err)
	}

	p := &Partition{StreamTime: 10, IdleStreamTime: 5, RollupEnds: []SetEnds{
		{Set: "region", Ends: []int64{3, math.MinInt64, 99}, Live: []int64{math.MinInt64, math.MinInt64, math.MinInt64}},
		{Set: "all", Ends: []int64{-4, 0, 1}, Live: []int64{7, math.MinInt64, 8}}},
		Progress: []int64{70, math.MinInt64, 160}}
	gp, err := DecodePartition(p.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gp.RollupEnds, p.RollupEnds) || !reflect.DeepEqual(gp.Progress, p.Progress) {
		t.Fatalf("rollup ends %v, progress %v; want %v, %v", gp.RollupEnds, gp.Progress, p.RollupEnds, p.Progress)
	}
	np, err := DecodePartition((&Partition{StreamTime: 10}).Append(nil))
	if err != nil || np.RollupEnds != nil || np.Progress != nil {
		t.Fatalf("a record without rollups: %v, ends %v, progress %v", err, np.RollupEnds, np.Progress)
	}
	// Version 2 kept the progress by stream time, after the graces, only when there was some.
	v2 := (&Partition{StreamTime: 10, IdleStreamTime: 5}).Append(nil)
	v2[1] = 2
	v2 = v2[:len(v2)-2] // version 3's counts of rollup sets and progress (0 and 0)
	bare := len(v2)
	v2 = binary.AppendUvarint(v2, 3)
	for _, t := range []int64{3, math.MinInt64, 99} {
		v2 = binary.AppendVarint(v2, t)
	}
	gp, err = DecodePartition(v2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gp.Progress, []int64{3, math.MinInt64, 99}) || gp.RollupEnds != nil {
		t.Fatalf("version 2: progress %v, ends %v", gp.Progress, gp.RollupEnds)
	}
	if np, err = DecodePartition(v2[:bare]); err != nil || np.Progress != nil {
		t.Fatalf("version 2 without progress: %v, %+v", err, np)
	}
}
