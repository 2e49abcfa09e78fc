package accum

import (
	"fmt"
	"math"
	"strconv"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/axiomhq/hyperloglog"

	"github.com/abacus-stream/abacus/totals"
)

// Distinct estimates how many distinct values it saw, with a HyperLogLog sketch. Its encoding is
// the sketch's own.
type Distinct struct{ sk *hyperloglog.Sketch }

// DistinctKind is the aggregation kind a state records for a Distinct.
const DistinctKind = "distinct hll"

// DistinctMaxBytes is the largest encoding of the HyperLogLog sketch (dense, precision 14:
// 16,392 bytes measured) with room for its framing.
const DistinctMaxBytes = 16_400

// NewDistinct is an empty Distinct.
func NewDistinct() *Distinct { return &Distinct{sk: hyperloglog.New()} }

// Insert adds a value.
func (d *Distinct) Insert(v []byte) { d.sk.Insert(v) }

// Merge adds o's values.
func (d *Distinct) Merge(o *Distinct) error { return d.sk.Merge(o.sk) }

// Value is the estimate.
func (d *Distinct) Value() totals.Value {
	return totals.Value{Kind: totals.KindInt, Int: int64(d.sk.Estimate())}
}

// AppendBinary appends d's encoding to b.
func (d *Distinct) AppendBinary(b []byte) []byte {
	out, err := d.sk.AppendBinary(b)
	if err != nil {
		// The sketch encodes from memory and cannot fail; losing it silently would be worse.
		panic(fmt.Sprintf("hyperloglog encode: %v", err))
	}
	return out
}

// DecodeDistinct reads a Distinct's encoding.
func DecodeDistinct(b []byte) (*Distinct, error) {
	sk := hyperloglog.New()
	if err := sk.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return &Distinct{sk: sk}, nil
}

// Quantiles keeps a DDSketch of the values, from which any quantile is read with a relative
// error of QuantileAccuracy. Its encoding is the sketch's, without the index mapping, which every
// Quantiles shares.
type Quantiles struct{ sk *ddsketch.DDSketch }

// QuantileAccuracy is the relative accuracy of every Quantiles.
const QuantileAccuracy = 0.01

// QuantilesKind is the aggregation kind a state records for a Quantiles: the quantiles asked for
// change only what is read out, not the sketch.
var QuantilesKind = "quantiles ddsketch " + strconv.FormatFloat(QuantileAccuracy, 'g', -1, 64)

// NewQuantiles is an empty Quantiles.
func NewQuantiles() *Quantiles {
	sk, err := ddsketch.NewDefaultDDSketch(QuantileAccuracy)
	if err != nil {
		panic(fmt.Sprintf("ddsketch with accuracy %v: %v", QuantileAccuracy, err))
	}
	return &Quantiles{sk: sk}
}

// CheckQuantiles says what is wrong with the quantiles asked for, or nil.
func CheckQuantiles(qs []float64) error {
	if len(qs) == 0 {
		return fmt.Errorf("no quantile requested")
	}
	for _, q := range qs {
		if q < 0 || q > 1 || math.IsNaN(q) {
			return fmt.Errorf("quantile %v is outside [0, 1]", q)
		}
	}
	return nil
}

// Add adds a value. Values the sketch cannot index (NaN, ±Inf, beyond its range) are skipped
// rather than allowed to stop the stream.
func (q *Quantiles) Add(x float64) { _ = q.sk.Add(x) }

// Merge adds o's values.
func (q *Quantiles) Merge(o *Quantiles) error { return q.sk.MergeWith(o.sk) }

// Value reads the quantiles qs; one the sketch cannot answer (no value yet) is NaN.
func (q *Quantiles) Value(qs []float64) totals.Value {
	v := totals.Value{Kind: totals.KindQuantiles}
	vals, err := q.sk.GetValuesAtQuantiles(qs)
	for i, qq := range qs {
		x := math.NaN()
		if err == nil {
			x = vals[i]
		}
		v.Quantiles = append(v.Quantiles, totals.Quantile{Q: qq, Value: x})
	}
	return v
}

// AppendBinary appends q's encoding to b.
func (q *Quantiles) AppendBinary(b []byte) []byte {
	q.sk.Encode(&b, true)
	return b
}

// DecodeQuantiles reads a Quantiles' encoding.
func DecodeQuantiles(b []byte) (*Quantiles, error) {
	q := NewQuantiles()
	if err := q.sk.DecodeAndMergeWith(b); err != nil {
		return nil, err
	}
	return q, nil
}
