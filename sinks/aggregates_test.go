package sinks

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
)

// TestKeyIndexWrittenUntilLanded: the encoder writes a key's index cell into one batch at a time,
// writes it again when that batch is dropped (a lost partition, a failed write) and stops only
// once a batch holding it landed; a later refresh period writes it once more, and a full cache
// forgets what landed rather than growing.
func TestKeyIndexWrittenUntilLanded(t *testing.T) {
	day := int64(24 * time.Hour / time.Millisecond)
	t0 := 20_000 * day
	enc := &AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 4, KeyIndex: "agg_keys", KeyIndexCache: 3}
	encode := func(set, key string, start int64) []store.Cell {
		t.Helper()
		r := totals.Record{Topology: "t", Set: set, Entity: key, Start: start, End: start + 60_000, Final: true, Revision: 1,
			Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}}
		cells, err := enc.Encode(&kgo.Record{Value: r.Encode()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var idx []store.Cell
		for _, c := range cells {
			if c.Table == "agg_keys" {
				idx = append(idx, c)
			}
		}
		return idx
	}
	first := encode("minute", "dev-1", t0)
	if len(first) != 2 || string(first[0].Row) != string(schema.KeyIndexRow("minute", "dev-1")) ||
		string(first[1].Row) != string(schema.KeyIndexRow(schema.KeyIndexEverySet, "dev-1")) {
		t.Fatalf("first window of a key: index cells %+v, want its set's row and its row among every set's keys", first)
	}
	for _, c := range first {
		if c.Timestamp != schema.KeyIndexTimestamp(t0+60_000, 0) || string(c.Qualifier) != schema.KeyIndexQualifier {
			t.Fatalf("first window of a key: index cell %+v", c)
		}
	}
	if got := encode("minute", "dev-1", t0+60_000); len(got) != 0 {
		t.Fatalf("a second window while the first's batch is in flight wrote %d index cells", len(got))
	}
	if got := encode("hour", "dev-1", t0); len(got) != 1 || string(got[0].Row) != string(schema.KeyIndexRow("hour", "dev-1")) {
		t.Fatalf("the same key in another set: index cells %+v, want the new set's row alone", got)
	}
	enc.batchesDropped()
	again := encode("minute", "dev-1", t0+120_000)
	if len(again) != 2 {
		t.Fatalf("after the batch was dropped: %d index cells, want the key's two rows written again", len(again))
	}
	enc.batchLanded(again)
	if got := encode("minute", "dev-1", t0+180_000); len(got) != 0 {
		t.Fatalf("after a batch with it landed: %d index cells", len(got))
	}
	enc.batchesDropped() // nothing pending for dev-1: what landed stays known
	if got := encode("minute", "dev-1", t0+240_000); len(got) != 0 {
		t.Fatalf("a drop after the landing made the key be written again: %d cells", len(got))
	}
	next := encode("minute", "dev-1", t0+day)
	if len(next) != 2 || next[0].Timestamp <= again[0].Timestamp || next[1].Timestamp != next[0].Timestamp {
		t.Fatalf("a window of the next day: %+v, want the key's two rows with a later timestamp than %d", next, again[0].Timestamp)
	}
	// The cache holds 6 index rows, 3 keys' two each: landing a 4th key forgets all, so each is
	// written once more.
	enc = &AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 4, KeyIndex: "agg_keys", KeyIndexCache: 6}
	var landed []store.Cell
	for _, k := range []string{"a", "b", "c"} {
		landed = append(landed, encode("minute", k, t0)...)
	}
	enc.batchLanded(landed)
	if got := encode("minute", "a", t0); len(got) != 0 {
		t.Fatalf("a key the cache holds was written again")
	}
	enc.batchLanded(encode("minute", "d", t0))
	if len(enc.landed) > 6 {
		t.Fatalf("the cache holds %d index rows, limit 6", len(enc.landed))
	}
	if got := encode("minute", "a", t0); len(got) != 2 {
		t.Fatalf("after the cache was full a forgotten key wrote %d index cells, want its two rows", len(got))
	}
	// Without KeyIndex no index cell is ever written.
	plain := &AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 4}
	r := totals.Record{Topology: "t", Set: "minute", Entity: "x", Start: t0, End: t0 + 60_000, Values: []totals.Value{{Name: "count", Kind: totals.KindInt, Int: 1}}}
	cells, _ := plain.Encode(&kgo.Record{Value: r.Encode()}, nil)
	for _, c := range cells {
		if c.Table != "agg" {
			t.Fatalf("an encoder without KeyIndex wrote to %s", c.Table)
		}
	}
}

// TestAggregatesCellsAsLaidOut: each totals record becomes its window row's cells exactly as
// package schema lays them out, values of every kind, whatever was encoded before or after it
// (the cells' bytes are cut from memory the encoder reuses); a record with a value that cannot be
// written adds no cell at all.
func TestAggregatesCellsAsLaidOut(t *testing.T) {
	enc := &AggregatesEncoder{Table: "agg", Family: "d", SaltBuckets: 8}
	records := []totals.Record{
		{Set: "minute", Entity: "dev\x00ice-1", Start: 60_000, End: 120_000, Final: true, Revision: 7, Values: []totals.Value{
			{Name: "count", Kind: totals.KindInt, Int: 42},
			{Name: "mean", Kind: totals.KindFloat, Float: 17.25},
			{Name: "q", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{{Q: 0.5, Value: 3}, {Q: 0.99, Value: 9}}},
			{Name: "custom", Kind: totals.KindBytes, Bytes: bytes.Repeat([]byte{0xAB}, 70_000)}, // past a slab block
		}},
		{Set: "hour", Entity: "e", Start: 0, End: 3_600_000, Revision: 1, Values: []totals.Value{{Name: "max", Kind: totals.KindFloat, Float: -1}}},
	}
	var dst []store.Cell
	var want []store.Cell
	for _, r := range records {
		var err error
		if dst, err = enc.Encode(&kgo.Record{Value: r.Encode()}, dst); err != nil {
			t.Fatal(err)
		}
		row := schema.AggregateRow(r.Entity, r.Set, r.Start, 8)
		for _, v := range r.Values {
			val, _ := schema.AppendCellValue(nil, v)
			want = append(want, store.Cell{Table: "agg", Row: row, Family: []byte("d"), Qualifier: []byte(v.Name), Timestamp: r.End, Value: val})
		}
		want = append(want, store.Cell{Table: "agg", Row: row, Family: []byte("d"), Qualifier: []byte(schema.MetaQualifier), Timestamp: r.End,
			Value: schema.AppendMeta(nil, r.Final, r.Revision)})
		// Appending to a cell's bytes must not reach into the next cell's.
		for i := range dst {
			_ = append(dst[i].Row, 0xEE)
			_ = append(dst[i].Qualifier, 0xEE)
			_ = append(dst[i].Value, 0xEE)
		}
	}
	bad := totals.Record{Set: "minute", Entity: "x", Start: 0, End: 60_000, Values: []totals.Value{
		{Name: "ok", Kind: totals.KindInt, Int: 1}, {Name: "odd", Kind: totals.Kind(99)}}}
	n := len(dst)
	var err error
	if dst, err = enc.Encode(&kgo.Record{Value: bad.Encode()}, dst); err == nil || len(dst) != n {
		t.Fatalf("a value of unknown kind: %d cells added, err %v", len(dst)-n, err)
	}
	if len(dst) != len(want) {
		t.Fatalf("%d cells, want %d", len(dst), len(want))
	}
	for i := range want {
		g, w := dst[i], want[i]
		if g.Table != w.Table || !bytes.Equal(g.Row, w.Row) || !bytes.Equal(g.Family, w.Family) || !bytes.Equal(g.Qualifier, w.Qualifier) ||
			g.Timestamp != w.Timestamp || !bytes.Equal(g.Value, w.Value) {
			t.Fatalf("cell %d:\n got %q %x %s %s %d %x\nwant %q %x %s %s %d %x", i, g.Table, g.Row, g.Family, g.Qualifier, g.Timestamp, g.Value,
				w.Table, w.Row, w.Family, w.Qualifier, w.Timestamp, w.Value)
		}
	}
}
