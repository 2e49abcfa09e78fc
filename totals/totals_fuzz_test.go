package totals

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode, as a corrupt or hostile record of the totals topic
// would (the sinks read it): it must never panic, every error must wrap ErrCorrupt, and what it
// accepts must encode to bytes that decode to the same record. A Decoder, kept from one input to
// the next as a sink keeps it, must answer exactly what Decode answers.
func FuzzDecode(f *testing.F) {
	var dec Decoder
	f.Add((&Record{Topology: "devices", Set: "minute", Entity: "device-001", Start: 1_767_225_600_000, End: 1_767_225_660_000,
		Final: true, Revision: 3, Values: []Value{
			{Name: "count", Kind: KindInt, Int: 42},
			{Name: "max", Kind: KindFloat, Float: 21.5},
			{Name: "p", Kind: KindQuantiles, Quantiles: []Quantile{{Q: 0.5, Value: 20}, {Q: 0.99, Value: 30}}},
			{Name: "sketch", Kind: KindBytes, Bytes: []byte{1, 2, 3}},
		}}).Encode())
	f.Add((&Record{}).Encode())
	f.Add([]byte{Version, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a huge string length with no bytes behind it
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		dr, derr := dec.Decode(b)
		if (err == nil) != (derr == nil) || (err != nil && err.Error() != derr.Error()) {
			t.Fatalf("Decode: %v; Decoder: %v", err, derr)
		}
		// Compared by encoding: a NaN is not DeepEqual to itself.
		if err == nil && !bytes.Equal(r.Encode(), dr.Encode()) {
			t.Fatalf("Decode: %+v\nDecoder: %+v", r, dr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		once := r.Encode()
		again, err := Decode(once)
		if err != nil {
			t.Fatalf("re-encoding of %x does not decode: %v", b, err)
		}
		if twice := again.Encode(); !bytes.Equal(once, twice) {
			t.Fatalf("unstable encoding of %x:\n%x\n%x", b, once, twice)
		}
	})
}
