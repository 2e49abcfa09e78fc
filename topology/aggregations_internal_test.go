package topology

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestFloatAccumulatorEncoding: every value and aux round-trips; whole numbers take a varint;
// the first form (flags, 8 bytes, varint aux) still decodes.
func TestFloatAccumulatorEncoding(t *testing.T) {
	def := floatDefOf("x", func(v float64) float64 { return v }, sumOp)
	for _, c := range []struct {
		v       float64
		aux     int64
		has     bool
		maxSize int
	}{
		{0, 0, false, 2}, {310, 0, true, 3}, {-7, 0, true, 2}, {1 << 52, 0, true, 10},
		{23.7, 0, true, 9}, {math.Copysign(0, -1), 0, true, 9}, {math.Inf(1), 0, true, 9},
		{math.Inf(-1), 0, true, 9}, {1 << 60, 0, true, 9}, {12, 1796038906074, true, 9},
		{0.5, -3, true, 10},
	} {
		a := &floatAcc{op: sumOp, has: c.has, v: c.v, aux: c.aux}
		b := a.AppendBinary(nil)
		if len(b) > c.maxSize {
			t.Errorf("%v (aux %d) takes %d bytes, want at most %d", c.v, c.aux, len(b), c.maxSize)
		}
		got, err := def.Decode(b)
		if err != nil {
			t.Fatalf("%v: %v", c.v, err)
		}
		g := got.(*floatAcc)
		if g.has != c.has || math.Float64bits(g.v) != math.Float64bits(c.v) || g.aux != c.aux {
			t.Errorf("%v aux %d has %v came back as %v aux %d has %v", c.v, c.aux, c.has, g.v, g.aux, g.has)
		}
		for n := range b {
			if _, err := def.Decode(b[:n]); err == nil {
				t.Errorf("%v: %d of %d bytes decode", c.v, n, len(b))
			}
		}
	}
	nan := (&floatAcc{op: sumOp, has: true, v: math.NaN()}).AppendBinary(nil)
	if got, err := def.Decode(nan); err != nil || !math.IsNaN(got.(*floatAcc).v) {
		t.Errorf("NaN: %v, %v", got, err)
	}

	// The first form: flags 1, value 2.5, aux 9.
	old := append([]byte{1}, binary.BigEndian.AppendUint64(nil, math.Float64bits(2.5))...)
	old = binary.AppendVarint(old, 9)
	got, err := def.Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	if g := got.(*floatAcc); !g.has || g.v != 2.5 || g.aux != 9 {
		t.Errorf("first form decoded as %+v", g)
	}
}
