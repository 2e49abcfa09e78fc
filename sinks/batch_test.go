package sinks

import (
	"fmt"
	"testing"

	"github.com/abacus-stream/abacus/store"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCoalesceKeepsTheLastValueOfEachCell(t *testing.T) {
	for _, byKey := range []bool{false, true} {
		b := newBatch()
		// Cells x and y are written three times each, z once; w differs from x only by timestamp.
		for i, name := range []string{"x", "y", "x", "z", "y", "x", "w"} {
			ts := int64(1)
			if name == "w" {
				name, ts = "x", 2
			}
			b.cells = append(b.cells, store.Cell{Table: "t", Row: []byte(name), Family: []byte("f"), Qualifier: []byte("q"), Timestamp: ts, Value: []byte(fmt.Sprint(i))})
			b.src = append(b.src, &kgo.Record{Offset: int64(i)})
		}
		if byKey {
			b.coalesceByKey()
		} else {
			b.coalesce()
		}
		var got string
		for i, c := range b.cells {
			got += fmt.Sprintf("%s@%d=%s/%d ", c.Row, c.Timestamp, c.Value, b.src[i].Offset)
		}
		if want := "z@1=3/3 y@1=4/4 x@1=5/5 x@2=6/6 "; got != want {
			t.Fatalf("byKey=%v: coalesced to %q, want %q", byKey, got, want)
		}
	}
}
