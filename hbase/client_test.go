package hbase

import (
	"bytes"
	"testing"
)

// TestRoundTripExplicitTimestamp writes cells with explicit timestamps and reads them back with
// exactly those timestamps and values.
func TestRoundTripExplicitTimestamp(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "roundtrip", fam("f"), nil)
	ctx := testContext(t)
	m := NewPut(table, []byte("row1")).
		Add("f", []byte("a"), 1000, []byte("va")).
		Add("f", []byte("b"), 2000, []byte("vb")).
		Add("f", []byte("empty"), 3000, nil)
	if err := c.Apply(ctx, []*Mutation{m}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("row1")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	want := map[string]struct {
		ts int64
		v  string
	}{"a": {1000, "va"}, "b": {2000, "vb"}, "empty": {3000, ""}}
	if len(res.Cells) != len(want) {
		t.Fatalf("got %d cells, want %d: %+v", len(res.Cells), len(want), res.Cells)
	}
	for _, cell := range res.Cells {
		w, ok := want[string(cell.Qualifier)]
		if !ok || cell.Timestamp != w.ts || string(cell.Value) != w.v || !bytes.Equal(cell.Row, []byte("row1")) || string(cell.Family) != "f" {
			t.Errorf("unexpected cell %s/%s:%s@%d=%q", cell.Row, cell.Family, cell.Qualifier, cell.Timestamp, cell.Value)
		}
	}
}
