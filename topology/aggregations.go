package topology

import (
	"errors"
	"fmt"

	"github.com/abacus-stream/abacus/accum"
	"github.com/abacus-stream/abacus/totals"
)

// The built-in aggregations are accum's accumulators, with the getter that reads their input
// from an event; their encodings, stored formats, are accum's. They implement plan.Accumulator;
// see its methods.

// countAcc counts events.
type countAcc struct{ accum.Count }

func countDef(name string) aggDef {
	return aggDef{
		Name:     name,
		Kind:     accum.CountKind,
		MaxBytes: accum.CountMaxBytes,
		New:      func() accumulator { return &countAcc{} },
		Decode: func(b []byte) (accumulator, error) {
			c, err := accum.DecodeCount(b)
			if err != nil {
				return nil, fmt.Errorf("count %q: %w", name, err)
			}
			return &countAcc{c}, nil
		},
	}
}

func (c *countAcc) Add(event, int64) { c.Count.Add() }
func (c *countAcc) Merge(o accumulator) error {
	oc, ok := o.(*countAcc)
	if !ok {
		return fmt.Errorf("count: cannot merge %T", o)
	}
	c.Count.Merge(&oc.Count)
	return nil
}

// floatAcc is a sum, min, max, mean or last of a float read from the event.
type floatAcc struct {
	accum.Float
	get func(event) float64
}

func floatDef[E any](name, field string, resolve func(string) (func(E) float64, error), op accum.Op) (aggDef, error) {
	f, err := resolve(field)
	if err != nil {
		return aggDef{}, err
	}
	return floatDefOf(name, f, op), nil
}

func floatDefOf[E any](name string, f func(E) float64, op accum.Op) aggDef {
	get := func(e event) float64 { return f(e.(E)) }
	return aggDef{
		Name:     name,
		Kind:     op.String(),
		MaxBytes: accum.FloatMaxBytes,
		New:      func() accumulator { return &floatAcc{Float: accum.Float{Op: op}, get: get} },
		Decode: func(b []byte) (accumulator, error) {
			a := &floatAcc{Float: accum.Float{Op: op}, get: get}
			if err := a.Float.Decode(b); err != nil {
				return nil, fmt.Errorf("aggregation %q: %w", name, err)
			}
			return a, nil
		},
	}
}

func (a *floatAcc) Add(e event, t int64) { a.Fold(a.get(e), t, 1) }
func (a *floatAcc) Merge(o accumulator) error {
	ob, ok := o.(*floatAcc)
	if !ok {
		return fmt.Errorf("float aggregation: cannot merge %T", o)
	}
	return a.Float.Merge(&ob.Float)
}

// distinctAcc estimates the distinct values read from the events.
type distinctAcc struct {
	*accum.Distinct
	get func(event) []byte
}

func distinctDef(name string, get func(event) []byte) aggDef {
	return aggDef{
		Name:     name,
		Kind:     accum.DistinctKind,
		MaxBytes: accum.DistinctMaxBytes,
		New:      func() accumulator { return &distinctAcc{Distinct: accum.NewDistinct(), get: get} },
		Decode: func(b []byte) (accumulator, error) {
			d, err := accum.DecodeDistinct(b)
			if err != nil {
				return nil, fmt.Errorf("distinct %q: %w", name, err)
			}
			return &distinctAcc{Distinct: d, get: get}, nil
		},
	}
}

func (d *distinctAcc) Add(e event, _ int64) { d.Insert(d.get(e)) }
func (d *distinctAcc) Merge(o accumulator) error {
	od, ok := o.(*distinctAcc)
	if !ok {
		return fmt.Errorf("distinct: cannot merge %T", o)
	}
	return d.Distinct.Merge(od.Distinct)
}

// quantilesAcc sketches the values read from the events, and reports quantiles qs.
type quantilesAcc struct {
	*accum.Quantiles
	qs  []float64
	get func(event) float64
}

func quantilesDef(name string, get func(event) float64, qs []float64) (aggDef, error) {
	if err := accum.CheckQuantiles(qs); err != nil {
		return aggDef{}, err
	}
	qs = append([]float64(nil), qs...)
	return aggDef{
		Name: name,
		Kind: accum.QuantilesKind,
		New:  func() accumulator { return &quantilesAcc{Quantiles: accum.NewQuantiles(), qs: qs, get: get} },
		Decode: func(b []byte) (accumulator, error) {
			q, err := accum.DecodeQuantiles(b)
			if err != nil {
				return nil, fmt.Errorf("quantiles %q: %w", name, err)
			}
			return &quantilesAcc{Quantiles: q, qs: qs, get: get}, nil
		},
	}, nil
}

func (q *quantilesAcc) Add(e event, _ int64) { q.Quantiles.Add(q.get(e)) }
func (q *quantilesAcc) Merge(o accumulator) error {
	oq, ok := o.(*quantilesAcc)
	if !ok {
		return fmt.Errorf("quantiles: cannot merge %T", o)
	}
	return q.Quantiles.Merge(oq.Quantiles)
}
func (q *quantilesAcc) Value() totals.Value { return q.Quantiles.Value(q.qs) }

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
