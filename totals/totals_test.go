package totals

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func sample() *Record {
	return &Record{Topology: "sensors", Set: "device-hourly", Entity: "dev-7", Start: 1_767_225_600_000,
		End: 1_767_229_200_000, Final: true, Revision: 42, Values: []Value{
			{Name: "n", Kind: KindInt, Int: 42},
			{Name: "max", Kind: KindFloat, Float: -3.25},
			{Name: "p", Kind: KindQuantiles, Quantiles: []Quantile{{0.5, 10}, {0.99, math.Inf(1)}}},
			{Name: "custom", Kind: KindBytes, Bytes: []byte{0, 1, 2}},
		}}
}

func TestRoundTrip(t *testing.T) {
	r := sample()
	got, err := Decode(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
	}
	if v, ok := got.Value("max"); !ok || v.Float != -3.25 {
		t.Errorf("Value(max) = %+v, %v", v, ok)
	}
}

// TestVersion1Layout pins the first bytes of the encoding, which sinks in other processes read.
func TestVersion1Layout(t *testing.T) {
	b := (&Record{Topology: "t", Set: "s", Entity: "e", Start: 1, End: 2, Revision: 3}).Encode()
	want := []byte{1, 1, 't', 1, 's', 1, 'e', 2, 4, 0, 3, 0}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("encoding % x, want % x", b, want)
	}
}

func TestDecodeRejectsCorruption(t *testing.T) {
	b := sample().Encode()
	for i := range len(b) {
		if _, err := Decode(b[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: error %v, want ErrCorrupt", i, err)
		}
	}
	if _, err := Decode(append([]byte{2}, b[1:]...)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 2 accepted: %v", err)
	}
}

func TestNewer(t *testing.T) {
	a := &Record{Revision: 5}
	b := &Record{Revision: 6}
	f := &Record{Revision: 6, Final: true}
	if !b.Newer(a) || a.Newer(b) || !f.Newer(b) || b.Newer(f) || f.Newer(f) {
		t.Error("newest-wins order is not (Final, Revision)")
	}
}

func TestValueNumber(t *testing.T) {
	for _, c := range []struct {
		v    Value
		want float64
	}{
		{Value{Kind: KindInt, Int: 7}, 7},
		{Value{Kind: KindFloat, Float: 2.5}, 2.5},
		{Value{Kind: KindQuantiles, Quantiles: []Quantile{{0.1, 1}, {0.45, 4}, {0.99, 9}}}, 4},
	} {
		if got := c.v.Number(); got != c.want {
			t.Errorf("%+v.Number() = %v, want %v", c.v, got, c.want)
		}
	}
	if !math.IsNaN((Value{Kind: KindBytes, Bytes: []byte("x")}).Number()) || !math.IsNaN((Value{Kind: KindQuantiles}).Number()) {
		t.Error("bytes, or quantiles with none, are not NaN")
	}
}

// TestDecoderSequence decodes records of different shapes one after another with one Decoder, as
// a sink does: each answer equals Decode's, whatever the records before it held (more or fewer
// values, quantiles in another place, a corrupt record between), and strings handed out before
// stay as they were.
func TestDecoderSequence(t *testing.T) {
	other := &Record{Topology: "sensors", Set: "minute", Entity: "dev-8", Start: 60_000, End: 120_000, Revision: 1,
		Values: []Value{{Name: "p", Kind: KindQuantiles, Quantiles: []Quantile{{0.5, 1}, {0.9, 2}, {0.99, 3}}}}}
	empty := &Record{Topology: "sensors", Set: "minute", Entity: "dev-9", Start: 0, End: 1,
		Values: []Value{{Name: "n", Kind: KindInt}, {Name: "p", Kind: KindQuantiles}, {Name: "x", Kind: KindFloat}}}
	corrupt := sample().Encode()
	corrupt = corrupt[:len(corrupt)-1]
	inputs := [][]byte{sample().Encode(), other.Encode(), corrupt, empty.Encode(), (&Record{}).Encode(), sample().Encode(), other.Encode()}
	var dec Decoder
	var entities []string
	for i, b := range inputs {
		want, werr := Decode(b)
		got, err := dec.Decode(b)
		if (werr == nil) != (err == nil) {
			t.Fatalf("input %d: Decode error %v, Decoder error %v", i, werr, err)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("input %d: %v does not wrap ErrCorrupt", i, err)
			}
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("input %d:\nDecoder %+v\nDecode  %+v", i, got, want)
		}
		entities = append(entities, got.Entity, got.Set)
	}
	if want := []string{"dev-7", "device-hourly", "dev-8", "minute", "dev-9", "minute", "", "", "dev-7", "device-hourly", "dev-8", "minute"}; !reflect.DeepEqual(entities, want) {
		t.Errorf("strings handed out changed: %q", entities)
	}
}

// TestDecoderReuses checks what the Decoder is for: once it has seen a record's shape, decoding
// another like it allocates only the entity's string.
func TestDecoderReuses(t *testing.T) {
	var dec Decoder
	b := sample().Encode()
	r1, err := dec.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	q1 := &r1.Values[2].Quantiles[0]
	r2, err := dec.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if r1 != r2 || &r2.Values[2].Quantiles[0] != q1 {
		t.Error("the second record does not reuse the first's memory")
	}
	// sample's bytes value is copied for its reader to keep: one allocation more.
	if n := testing.AllocsPerRun(100, func() { _, _ = dec.Decode(b) }); n != 2 {
		t.Errorf("%v allocations per record, want 2 (entity, bytes value)", n)
	}
}
