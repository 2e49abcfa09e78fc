// Package accum holds the built-in aggregations' accumulators and their stored encodings: how
// each folds a value in, merges another of its kind, and what total it reports. The bytes
// AppendBinary writes are a stored format: they live in the processor's window state and
// changelog, and travel in rollup partials, so every encoding here is read back by every later
// version (the golden files of state and internal/engine hold them). It needs no topology code,
// so that a reader of stored accumulators (a merge at query time) can use it alone.
package accum

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/abacus-stream/abacus/totals"
)

// ErrShort is returned when an accumulator's encoding is truncated.
var ErrShort = errors.New("accumulator encoding truncated")

// Count counts events. Its encoding is a uvarint.
type Count struct{ N uint64 }

// CountMaxBytes is the largest encoding of a Count.
const CountMaxBytes = binary.MaxVarintLen64 + 1

// CountKind is the aggregation kind a state records for a Count.
const CountKind = "count"

// Add counts one event.
func (c *Count) Add() { c.N++ }

// Merge adds o's count.
func (c *Count) Merge(o *Count) { c.N += o.N }

// Value is the count.
func (c *Count) Value() totals.Value { return totals.Value{Kind: totals.KindInt, Int: int64(c.N)} }

// AppendBinary appends c's encoding to b.
func (c *Count) AppendBinary(b []byte) []byte { return binary.AppendUvarint(b, c.N) }

// DecodeCount reads a Count's encoding.
func DecodeCount(b []byte) (Count, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return Count{}, ErrShort
	}
	return Count{N: n}, nil
}

// Op is the float aggregations, which share one accumulator and its encoding: a value and an
// aux number (mean: count; last: event time).
type Op uint8

// The float aggregations.
const (
	Sum  Op = iota + 1
	Min     // the least value
	Max     // the greatest value
	Mean    // V is the sum, Aux the count
	Last    // Aux is the event time of V
)

// String is the aggregation kind of the op: the ops share an encoding but not a meaning, so a
// sum read as a max would be garbage, and the state records the kind to refuse that.
func (op Op) String() string {
	switch op {
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	case Mean:
		return "mean"
	case Last:
		return "last"
	}
	return "float " + strconv.Itoa(int(op))
}

// Float is the accumulator of the float aggregations.
type Float struct {
	Op  Op
	Has bool // a value was folded in
	V   float64
	Aux int64
}

// FloatMaxBytes is the largest encoding of a Float: a flags byte, the value and a varint aux.
const FloatMaxBytes = 24

// Fold applies a value x with event time aux (Last) or count n (Mean).
func (a *Float) Fold(x float64, aux int64, n int64) {
	switch a.Op {
	case Sum:
		a.V += x
	case Min:
		if !a.Has || x < a.V {
			a.V = x
		}
	case Max:
		if !a.Has || x > a.V {
			a.V = x
		}
	case Mean:
		a.V += x
		a.Aux += n
	case Last:
		// >= so that, on equal event times, the later applied event wins.
		if !a.Has || aux >= a.Aux {
			a.V, a.Aux = x, aux
		}
	}
	a.Has = true
}

// Merge folds o, of the same op, into a.
func (a *Float) Merge(o *Float) error {
	if o.Op != a.Op {
		return fmt.Errorf("float aggregation: cannot merge a %s into a %s", o.Op, a.Op)
	}
	if !o.Has {
		return nil
	}
	switch a.Op {
	case Mean:
		a.V += o.V
		a.Aux += o.Aux
		a.Has = true
	case Last:
		// On equal event times the larger value wins: partial totals of a rollup merge in
		// whatever order they arrive, and the result must not depend on it.
		if !a.Has || o.Aux > a.Aux || (o.Aux == a.Aux && o.V > a.V) {
			a.V, a.Aux = o.V, o.Aux
		}
		a.Has = true
	default:
		a.Fold(o.V, 0, 0)
	}
	return nil
}

// Value is the aggregation's value: the mean divides, the others are V.
func (a *Float) Value() totals.Value {
	v := a.V
	if a.Op == Mean {
		if a.Aux == 0 {
			v = 0
		} else {
			v = a.V / float64(a.Aux)
		}
	}
	return totals.Value{Kind: totals.KindFloat, Float: v}
}

// The float accumulator's encoding opens with a flags byte. Flags without floatCompact (the
// first form, still read) are followed by the value's 8 bytes and a varint aux. With it, the
// value is a zigzag varint when it is a whole number that fits one (sums, maxima and counts of
// whole quantities usually are: 2 or 3 bytes instead of 8), else its 8 bytes; aux follows only
// when not zero. A window's state is mostly its accumulators, and the table holds every open one.
const (
	floatHas      = 1 << 0
	floatIntegral = 1 << 1
	floatAux      = 1 << 2
	floatCompact  = 1 << 7
)

// maxExactInt is the largest magnitude below which every whole float64 is exact.
const maxExactInt = 1 << 53

// AppendBinary appends a's encoding (without its op, which the aggregation knows) to b.
func (a *Float) AppendBinary(b []byte) []byte {
	flags := byte(floatCompact)
	if a.Has {
		flags |= floatHas
	}
	integral := a.V == math.Trunc(a.V) && math.Abs(a.V) < maxExactInt && !(a.V == 0 && math.Signbit(a.V))
	if integral {
		flags |= floatIntegral
	}
	if a.Aux != 0 {
		flags |= floatAux
	}
	b = append(b, flags)
	if integral {
		b = binary.AppendVarint(b, int64(a.V))
	} else {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(a.V))
	}
	if a.Aux != 0 {
		b = binary.AppendVarint(b, a.Aux)
	}
	return b
}

// Decode reads an encoding into a, whose Op stays.
func (a *Float) Decode(b []byte) error {
	if len(b) == 0 {
		return ErrShort
	}
	flags := b[0]
	b = b[1:]
	a.Has = flags&floatHas != 0
	if flags&floatCompact == 0 {
		if len(b) < 8 {
			return ErrShort
		}
		a.V = math.Float64frombits(binary.BigEndian.Uint64(b[:8]))
		aux, k := binary.Varint(b[8:])
		if k <= 0 {
			return ErrShort
		}
		a.Aux = aux
		return nil
	}
	if flags&floatIntegral != 0 {
		v, k := binary.Varint(b)
		if k <= 0 {
			return ErrShort
		}
		a.V, b = float64(v), b[k:]
	} else {
		if len(b) < 8 {
			return ErrShort
		}
		a.V, b = math.Float64frombits(binary.BigEndian.Uint64(b[:8])), b[8:]
	}
	a.Aux = 0
	if flags&floatAux != 0 {
		aux, k := binary.Varint(b)
		if k <= 0 {
			return ErrShort
		}
		a.Aux, b = aux, b[k:]
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after a float accumulator", len(b))
	}
	return nil
}
