// Package jsonnum writes float64 values as encoding/json writes them, without its reflection:
// the query servers write 100,000s of numbers an answer (the OpenTSDB API's data points, the
// windows API's values), and encoding/json's path through interfaces and maps was most of what
// those answers cost to write.
package jsonnum

import (
	"math"
	"strconv"
)

// Append appends v as encoding/json writes a float64, and NaN and infinities, which JSON cannot
// carry, as null. Whole numbers below 2^53 are written as integers, which is what the shortest
// form is for them, at a fraction of its cost.
func Append(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 && !(v == 0 && math.Signbit(v)) {
		return strconv.AppendInt(b, int64(v), 10)
	}
	f := byte('f')
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		f = 'e'
	}
	n0 := len(b)
	b = strconv.AppendFloat(b, v, f, -1, 64)
	if n := len(b); f == 'e' && n-n0 >= 4 && string(b[n-4:n-1]) == "e-0" {
		b = append(b[:n-2], b[n-1]) // 1e-07 as 1e-7, as encoding/json writes it
	}
	return b
}
