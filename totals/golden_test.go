package totals

import (
	"bytes"
	"testing"

	"github.com/abacus-stream/abacus/internal/golden"
)

// TestGoldenRecord pins the totals record, the contract between the processor, the sinks and
// queries: a final total with a value of every kind.
func TestGoldenRecord(t *testing.T) {
	r := &Record{Topology: "devices", Set: "minute", Entity: "dev-1", Start: 1_767_225_600_000, End: 1_767_225_660_000,
		Final: true, Revision: 42, Values: []Value{
			{Name: "count", Kind: KindInt, Int: 42},
			{Name: "mean_temp", Kind: KindFloat, Float: 21.5},
			{Name: "temp_quantiles", Kind: KindQuantiles, Quantiles: []Quantile{{Q: 0.5, Value: 21}, {Q: 0.99, Value: 30.25}}},
			{Name: "custom", Kind: KindBytes, Bytes: []byte{1, 2, 3}},
		}}
	b := r.Encode()
	golden.Check(t, "record-v1", "totals record, version 1: a final with an int, a float, quantiles and bytes", b)
	got, err := Decode(golden.Read(t, "record-v1"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Encode(), b) {
		t.Fatalf("decodes as %+v, which encodes otherwise", got)
	}
}
