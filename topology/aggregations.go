package topology

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/axiomhq/hyperloglog"

	"github.com/abacus-stream/abacus/totals"
)

// errShort is returned when an accumulator's encoding is truncated.
var errShort = errors.New("accumulator encoding truncated")

// count: uvarint number of events.
type countAcc struct{ n uint64 }

func countDef(name string) aggDef {
	return aggDef{
		Name:     name,
		Kind:     "count",
		MaxBytes: 11, // a uvarint
		New:      func() accumulator { return &countAcc{} },
		Decode: func(b []byte) (accumulator, error) {
			n, k := binary.Uvarint(b)
			if k <= 0 {
				return nil, fmt.Errorf("count %q: %w", name, errShort)
			}
			return &countAcc{n: n}, nil
		},
	}
}

// The accumulators below implement plan.Accumulator; see its methods.

func (c *countAcc) Add(event, int64) { c.n++ }
func (c *countAcc) Merge(o accumulator) error {
	oc, ok := o.(*countAcc)
	if !ok {
		return fmt.Errorf("count: cannot merge %T", o)
	}
	c.n += oc.n
	return nil
}
func (c *countAcc) Value() totals.Value          { return totals.Value{Kind: totals.KindInt, Int: int64(c.n)} }
func (c *countAcc) AppendBinary(b []byte) []byte { return binary.AppendUvarint(b, c.n) }

// floatOp identifies the float aggregations, which share one accumulator and its encoding (see
// floatAcc.AppendBinary): a value and an aux number (mean: count; last: event time).
type floatOp uint8

const (
	sumOp floatOp = iota + 1
	minOp
	maxOp
	meanOp // v = sum, aux = count
	lastOp // aux = event time of v
)

// String is the aggregation kind of the op (plan.Agg.Kind): the ops share an encoding but not a
// meaning, so a sum read as a max would be garbage.
func (op floatOp) String() string {
	switch op {
	case sumOp:
		return "sum"
	case minOp:
		return "min"
	case maxOp:
		return "max"
	case meanOp:
		return "mean"
	case lastOp:
		return "last"
	}
	return "float " + strconv.Itoa(int(op))
}

type floatAcc struct {
	op  floatOp
	has bool
	v   float64
	aux int64
	get func(event) float64
}

func floatDef[E any](name, field string, resolve func(string) (func(E) float64, error), op floatOp) (aggDef, error) {
	f, err := resolve(field)
	if err != nil {
		return aggDef{}, err
	}
	return floatDefOf(name, f, op), nil
}

func floatDefOf[E any](name string, f func(E) float64, op floatOp) aggDef {
	get := func(e event) float64 { return f(e.(E)) }
	return aggDef{
		Name:     name,
		Kind:     op.String(),
		MaxBytes: 24, // a flags byte, the value and a varint aux
		New:      func() accumulator { return &floatAcc{op: op, get: get} },
		Decode: func(b []byte) (accumulator, error) {
			a := &floatAcc{op: op, get: get}
			if err := a.decode(b); err != nil {
				return nil, fmt.Errorf("aggregation %q: %w", name, err)
			}
			return a, nil
		},
	}
}

func (a *floatAcc) Add(e event, t int64) { a.fold(a.get(e), t, 1) }

// fold applies a value x with time t (last) or count n (mean) to the accumulator.
func (a *floatAcc) fold(x float64, aux int64, n int64) {
	switch a.op {
	case sumOp:
		a.v += x
	case minOp:
		if !a.has || x < a.v {
			a.v = x
		}
	case maxOp:
		if !a.has || x > a.v {
			a.v = x
		}
	case meanOp:
		a.v += x
		a.aux += n
	case lastOp:
		// >= so that, on equal event times, the later applied event wins.
		if !a.has || aux >= a.aux {
			a.v, a.aux = x, aux
		}
	}
	a.has = true
}

func (a *floatAcc) Merge(o accumulator) error {
	ob, ok := o.(*floatAcc)
	if !ok || ob.op != a.op {
		return fmt.Errorf("float aggregation: cannot merge %T", o)
	}
	if !ob.has {
		return nil
	}
	switch a.op {
	case meanOp:
		a.v += ob.v
		a.aux += ob.aux
		a.has = true
	case lastOp:
		// On equal event times the larger value wins: partial totals of a rollup merge in
		// whatever order they arrive, and the result must not depend on it.
		if !a.has || ob.aux > a.aux || (ob.aux == a.aux && ob.v > a.v) {
			a.v, a.aux = ob.v, ob.aux
		}
		a.has = true
	default:
		a.fold(ob.v, 0, 0)
	}
	return nil
}

func (a *floatAcc) Value() totals.Value {
	v := a.v
	if a.op == meanOp {
		if a.aux == 0 {
			v = 0
		} else {
			v = a.v / float64(a.aux)
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

func (a *floatAcc) AppendBinary(b []byte) []byte {
	flags := byte(floatCompact)
	if a.has {
		flags |= floatHas
	}
	integral := a.v == math.Trunc(a.v) && math.Abs(a.v) < maxExactInt && !(a.v == 0 && math.Signbit(a.v))
	if integral {
		flags |= floatIntegral
	}
	if a.aux != 0 {
		flags |= floatAux
	}
	b = append(b, flags)
	if integral {
		b = binary.AppendVarint(b, int64(a.v))
	} else {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(a.v))
	}
	if a.aux != 0 {
		b = binary.AppendVarint(b, a.aux)
	}
	return b
}

func (a *floatAcc) decode(b []byte) error {
	if len(b) == 0 {
		return errShort
	}
	flags := b[0]
	b = b[1:]
	a.has = flags&floatHas != 0
	if flags&floatCompact == 0 {
		if len(b) < 8 {
			return errShort
		}
		a.v = math.Float64frombits(binary.BigEndian.Uint64(b[:8]))
		aux, k := binary.Varint(b[8:])
		if k <= 0 {
			return errShort
		}
		a.aux = aux
		return nil
	}
	if flags&floatIntegral != 0 {
		v, k := binary.Varint(b)
		if k <= 0 {
			return errShort
		}
		a.v, b = float64(v), b[k:]
	} else {
		if len(b) < 8 {
			return errShort
		}
		a.v, b = math.Float64frombits(binary.BigEndian.Uint64(b[:8])), b[8:]
	}
	if flags&floatAux != 0 {
		aux, k := binary.Varint(b)
		if k <= 0 {
			return errShort
		}
		a.aux, b = aux, b[k:]
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after a float accumulator", len(b))
	}
	return nil
}

// distinct: the HyperLogLog sketch's own binary encoding.
type distinctAcc struct {
	sk  *hyperloglog.Sketch
	get func(event) []byte
}

// hllMaxBytes is the largest encoding of the HyperLogLog sketch (dense, precision 14: 16,392
// bytes measured) with room for its framing.
const hllMaxBytes = 16_400

func distinctDef(name string, get func(event) []byte) aggDef {
	return aggDef{
		Name:     name,
		Kind:     "distinct hll",
		MaxBytes: hllMaxBytes,
		New:      func() accumulator { return &distinctAcc{sk: hyperloglog.New(), get: get} },
		Decode: func(b []byte) (accumulator, error) {
			sk := hyperloglog.New()
			if err := sk.UnmarshalBinary(b); err != nil {
				return nil, fmt.Errorf("distinct %q: %w", name, err)
			}
			return &distinctAcc{sk: sk, get: get}, nil
		},
	}
}

func (d *distinctAcc) Add(e event, _ int64) { d.sk.Insert(d.get(e)) }
func (d *distinctAcc) Merge(o accumulator) error {
	od, ok := o.(*distinctAcc)
	if !ok {
		return fmt.Errorf("distinct: cannot merge %T", o)
	}
	return d.sk.Merge(od.sk)
}
func (d *distinctAcc) Value() totals.Value {
	return totals.Value{Kind: totals.KindInt, Int: int64(d.sk.Estimate())}
}
func (d *distinctAcc) AppendBinary(b []byte) []byte {
	out, err := d.sk.AppendBinary(b)
	if err != nil {
		// The sketch encodes from memory and cannot fail; losing it silently would be worse.
		panic(fmt.Sprintf("hyperloglog encode: %v", err))
	}
	return out
}

// quantiles: the DDSketch encoding without its index mapping, which every accumulator of the
// aggregation shares.
const quantileAccuracy = 0.01

type quantilesAcc struct {
	sk  *ddsketch.DDSketch
	qs  []float64
	get func(event) float64
}

func quantilesDef(name string, get func(event) float64, qs []float64) (aggDef, error) {
	if len(qs) == 0 {
		return aggDef{}, errors.New("no quantile requested")
	}
	for _, q := range qs {
		if q < 0 || q > 1 || math.IsNaN(q) {
			return aggDef{}, fmt.Errorf("quantile %v is outside [0, 1]", q)
		}
	}
	qs = append([]float64(nil), qs...)
	newSketch := func() *ddsketch.DDSketch {
		sk, err := ddsketch.NewDefaultDDSketch(quantileAccuracy)
		if err != nil {
			panic(fmt.Sprintf("ddsketch with accuracy %v: %v", quantileAccuracy, err))
		}
		return sk
	}
	return aggDef{
		Name: name,
		// The quantiles asked for change only what is read out, not the sketch.
		Kind: "quantiles ddsketch " + strconv.FormatFloat(quantileAccuracy, 'g', -1, 64),
		New:  func() accumulator { return &quantilesAcc{sk: newSketch(), qs: qs, get: get} },
		Decode: func(b []byte) (accumulator, error) {
			sk := newSketch()
			if err := sk.DecodeAndMergeWith(b); err != nil {
				return nil, fmt.Errorf("quantiles %q: %w", name, err)
			}
			return &quantilesAcc{sk: sk, qs: qs, get: get}, nil
		},
	}, nil
}

func (q *quantilesAcc) Add(e event, _ int64) {
	// Add fails only for values the sketch cannot index (NaN, ±Inf, beyond its range): those are
	// skipped rather than allowed to stop the stream.
	_ = q.sk.Add(q.get(e))
}
func (q *quantilesAcc) Merge(o accumulator) error {
	oq, ok := o.(*quantilesAcc)
	if !ok {
		return fmt.Errorf("quantiles: cannot merge %T", o)
	}
	return q.sk.MergeWith(oq.sk)
}
func (q *quantilesAcc) Value() totals.Value {
	v := totals.Value{Kind: totals.KindQuantiles}
	vals, err := q.sk.GetValuesAtQuantiles(q.qs)
	for i, qq := range q.qs {
		x := math.NaN()
		if err == nil {
			x = vals[i]
		}
		v.Quantiles = append(v.Quantiles, totals.Quantile{Q: qq, Value: x})
	}
	return v
}
func (q *quantilesAcc) AppendBinary(b []byte) []byte {
	q.sk.Encode(&b, true)
	return b
}

// UserDefined is a user-defined aggregation over events E with accumulator A. Every function but
// Merge is required; Encode and Decode must round-trip, because accumulators live in the changelog.
type UserDefined[E, A any] struct {
	Init func() A
	Add  func(acc A, e E, eventTime int64) A
	// Merge folds b into a. Without it the aggregation cannot be in a set of session windows or
	// in a rollup set (By, Global), which merge accumulators; Build says so. It must not depend
	// on the order of its arguments' events: a rollup merges partial totals as they arrive.
	Merge  func(a, b A) A
	Encode func(A) []byte
	Decode func([]byte) (A, error)
	// Version names the encoding of A that Encode writes (optional). The aggregation's kind in
	// the state is its accumulator's Go type and this version: a processor started over state
	// written with another type or version refuses to start, naming the set and aggregation,
	// instead of decoding one encoding as another. Change it when Encode's format changes.
	Version string
}

func (u UserDefined[E, A]) def(name string) (aggDef, error) {
	switch {
	case u.Init == nil:
		return aggDef{}, errors.New("UserDefined.Init is nil")
	case u.Add == nil:
		return aggDef{}, errors.New("UserDefined.Add is nil")
	case u.Encode == nil:
		return aggDef{}, errors.New("UserDefined.Encode is nil")
	case u.Decode == nil:
		return aggDef{}, errors.New("UserDefined.Decode is nil")
	}
	kind := fmt.Sprintf("custom %T", *new(A))
	if u.Version != "" {
		kind += " " + u.Version
	}
	return aggDef{
		Name:    name,
		Kind:    kind,
		NoMerge: u.Merge == nil,
		New:     func() accumulator { return &userAcc[E, A]{u: u, a: u.Init()} },
		Decode: func(b []byte) (accumulator, error) {
			a, err := u.Decode(b)
			if err != nil {
				return nil, fmt.Errorf("custom aggregation %q: %w", name, err)
			}
			return &userAcc[E, A]{u: u, a: a}, nil
		},
	}, nil
}

type userAcc[E, A any] struct {
	u UserDefined[E, A]
	a A
}

func (c *userAcc[E, A]) Add(e event, t int64) { c.a = c.u.Add(c.a, e.(E), t) }
func (c *userAcc[E, A]) Merge(o accumulator) error {
	oc, ok := o.(*userAcc[E, A])
	if !ok {
		return fmt.Errorf("custom aggregation: cannot merge %T", o)
	}
	if c.u.Merge == nil {
		return errors.New("custom aggregation: UserDefined.Merge is nil")
	}
	c.a = c.u.Merge(c.a, oc.a)
	return nil
}
func (c *userAcc[E, A]) Value() totals.Value {
	return totals.Value{Kind: totals.KindBytes, Bytes: c.u.Encode(c.a)}
}
func (c *userAcc[E, A]) AppendBinary(b []byte) []byte { return append(b, c.u.Encode(c.a)...) }
