package accum

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestFloatAccumulatorEncoding: every value and aux round-trips; whole numbers take a varint;
// the first form (flags, 8 bytes, varint aux) still decodes.
func TestFloatAccumulatorEncoding(t *testing.T) {
	decode := func(b []byte) (*Float, error) {
		a := &Float{Op: Sum}
		return a, a.Decode(b)
	}
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
		a := &Float{Op: Sum, Has: c.has, V: c.v, Aux: c.aux}
		b := a.AppendBinary(nil)
		if len(b) > c.maxSize {
			t.Errorf("%v (aux %d) takes %d bytes, want at most %d", c.v, c.aux, len(b), c.maxSize)
		}
		g, err := decode(b)
		if err != nil {
			t.Fatalf("%v: %v", c.v, err)
		}
		if g.Has != c.has || math.Float64bits(g.V) != math.Float64bits(c.v) || g.Aux != c.aux {
			t.Errorf("%v aux %d has %v came back as %v aux %d has %v", c.v, c.aux, c.has, g.V, g.Aux, g.Has)
		}
		for n := range b {
			if _, err := decode(b[:n]); err == nil {
				t.Errorf("%v: %d of %d bytes decode", c.v, n, len(b))
			}
		}
	}
	nan := (&Float{Op: Sum, Has: true, V: math.NaN()}).AppendBinary(nil)
	if got, err := decode(nan); err != nil || !math.IsNaN(got.V) {
		t.Errorf("NaN: %v, %v", got, err)
	}

	// The first form: flags 1, value 2.5, aux 9.
	old := append([]byte{1}, binary.BigEndian.AppendUint64(nil, math.Float64bits(2.5))...)
	old = binary.AppendVarint(old, 9)
	g, err := decode(old)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Has || g.V != 2.5 || g.Aux != 9 {
		t.Errorf("first form decoded as %+v", g)
	}
}

// TestMerges: each accumulator merged from parts equals the one that saw every value, whatever
// the order of the parts, and survives its encoding.
func TestMerges(t *testing.T) {
	xs := []float64{3, -1, 7.5, 7.5, 2, 10, 0}
	for _, op := range []Op{Sum, Min, Max, Mean, Last} {
		whole, a, b := &Float{Op: op}, &Float{Op: op}, &Float{Op: op}
		for i, x := range xs {
			whole.Fold(x, int64(i%3), 1) // event times repeat: Last's ties
			part := a
			if i%2 == 1 {
				part = b
			}
			part.Fold(x, int64(i%3), 1)
		}
		for _, order := range [][2]*Float{{a, b}, {b, a}} {
			m := &Float{Op: op}
			for _, p := range order {
				enc := p.AppendBinary(nil)
				d := &Float{Op: op}
				if err := d.Decode(enc); err != nil {
					t.Fatal(err)
				}
				if err := m.Merge(d); err != nil {
					t.Fatal(err)
				}
			}
			if op != Last && m.Value().Float != whole.Value().Float {
				t.Errorf("%s merged %v, want %v", op, m.Value(), whole.Value())
			}
			if op == Last && m.Value().Float != 10 { // the largest value among the latest time (2)
				t.Errorf("last merged %v, want 10 whatever the order", m.Value())
			}
		}
	}
	if err := (&Float{Op: Sum}).Merge(&Float{Op: Max, Has: true}); err == nil {
		t.Error("a max merged into a sum")
	}

	c1, c2 := Count{N: 3}, Count{N: 4}
	c1.Merge(&c2)
	if dc, err := DecodeCount(c1.AppendBinary(nil)); err != nil || dc.Value().Int != 7 {
		t.Errorf("count: %v %v", dc, err)
	}

	d1, d2 := NewDistinct(), NewDistinct()
	for i := range 100 {
		d1.Insert([]byte{byte(i)})
		d2.Insert([]byte{byte(i + 50)})
	}
	dd, err := DecodeDistinct(d2.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Merge(dd); err != nil {
		t.Fatal(err)
	}
	if n := d1.Value().Int; n < 148 || n > 152 {
		t.Errorf("distinct of 150 values estimated %d", n)
	}

	q1, q2 := NewQuantiles(), NewQuantiles()
	for i := 1; i <= 100; i++ {
		q1.Add(float64(i))
		q2.Add(float64(i + 100))
	}
	if err := CheckQuantiles([]float64{0.5, 1.5}); err == nil {
		t.Error("quantile 1.5 accepted")
	}
	dq, err := DecodeQuantiles(q2.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := q1.Merge(dq); err != nil {
		t.Fatal(err)
	}
	if med := q1.Value([]float64{0.5}).Quantiles[0].Value; math.Abs(med-100) > 2 {
		t.Errorf("median of 1..200 read as %v", med)
	}
}
