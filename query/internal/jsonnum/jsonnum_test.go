package jsonnum

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAppendIsWhatJSONWrites: a value is written as encoding/json writes a float64 (whole numbers
// by their digits, the rest in strconv's shortest form, exponents without a leading zero), and
// what JSON cannot carry as null.
func TestAppendIsWhatJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 3, 1 << 52, 1<<53 - 1, 1 << 53, 1<<53 + 2, -(1 << 53), 1e20, 1e21,
		1e-7, 1.5e-10, 0.1, -2.5, 123456789012, math.MaxFloat64, math.SmallestNonzeroFloat64}
	for range 5000 {
		vals = append(vals, math.Round(rng.NormFloat64()*1e6), rng.NormFloat64()*math.Pow(10, float64(rng.IntN(60)-30)))
	}
	for _, v := range vals {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := Append([]byte("x"), v); string(got) != "x"+string(want) {
			t.Fatalf("%v written as %s, encoding/json writes %s", v, got[1:], want)
		}
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got := Append(nil, v); string(got) != "null" {
			t.Fatalf("%v written as %s, want null", v, got)
		}
	}
}
