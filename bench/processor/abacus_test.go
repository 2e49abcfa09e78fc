package main

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/abacus-stream/abacus/totals"
)

func TestAbacusTopologyBuilds(t *testing.T) {
	if _, err := abacusTopology("g", "in", "out", "late"); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeAbacus(t *testing.T) {
	r := totals.Record{Topology: "g", Set: "minute", Entity: "dev-0000001", Start: 60_000, End: 120_000, Final: true, Revision: 3,
		Values: []totals.Value{
			{Name: "count", Kind: totals.KindInt, Int: 3},
			{Name: "sum", Kind: totals.KindFloat, Float: 12},
			{Name: "max", Kind: totals.KindFloat, Float: 7},
		}}
	f, isFinal, err := decodeAbacus(&kgo.Record{Value: r.Encode()})
	if err != nil || !isFinal {
		t.Fatalf("decode: final %v, %v", isFinal, err)
	}
	if f != (final{entity: "dev-0000001", start: 60_000, agg: winAgg{count: 3, sum: 12, max: 7}}) {
		t.Fatalf("decoded %+v", f)
	}
	r.Values = r.Values[:1]
	if _, _, err := decodeAbacus(&kgo.Record{Value: r.Encode()}); err == nil {
		t.Fatal("a total without sum and max decodes")
	}
}
