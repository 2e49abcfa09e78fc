package topology

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/abacus-stream/abacus/accum"
	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/windows"
)

// EmitMode says when an aggregate set emits totals: EmitFinal, EmitEveryUpdate or EmitEarly.
type EmitMode = plan.EmitMode

// The emission modes.
const (
	EmitFinal       = plan.EmitFinal       // once, when the window closes
	EmitEveryUpdate = plan.EmitEveryUpdate // after every applied event, and the final
	EmitEarly       = plan.EmitEarly       // at most every Emission.Every() of wall-clock time, and the final
)

// Emission is an aggregate set's emission policy. FinalOnly, EveryUpdate and EarlyEvery make
// one; its zero value is FinalOnly.
type Emission struct {
	mode  EmitMode
	every time.Duration // EmitEarly only
}

// Mode is when the set emits.
func (e Emission) Mode() EmitMode { return e.mode }

// Every is the least wall-clock time between two early totals of a window (EmitEarly only).
func (e Emission) Every() time.Duration { return e.every }

// FinalOnly emits one total per window, when it closes (the default).
func FinalOnly() Emission { return Emission{mode: EmitFinal} }

// EveryUpdate emits a total after every event applied to a window, then the final one.
func EveryUpdate() Emission { return Emission{mode: EmitEveryUpdate} }

// EarlyEvery emits a window's running total at most every d of wall-clock time while it is open,
// then the final one.
func EarlyEvery(d time.Duration) Emission { return Emission{mode: EmitEarly, every: d} }

// The engine's view of aggregations and sets lives in internal/plan; these short names keep the
// declarations below readable.
type (
	accumulator = plan.Accumulator
	aggDef      = plan.Agg
	event       = plan.Event
)

// AggregateSet declares the windows and aggregations computed over a Source of events E.
type AggregateSet[E any] struct {
	src      *Source[E]
	setName  string
	spec     windows.Spec
	grace    time.Duration
	graceSet bool
	emit     Emission
	types    []string
	where    func(E) bool
	rollup   *rollupDecl[E]
	aggs     []aggDecl[E]
	// finer is the set this one is a coarser form of (Coarser): it takes its events, key and
	// aggregations from there; keep names those of its aggregations it keeps (nil: all).
	finer *AggregateSet[E]
	keep  []string
}

// rollupDecl is what By or Global declared.
type rollupDecl[E any] struct {
	dimension string
	key       func(E) string
	global    bool
	calls     int // By and Global calls: a set has one key
}

type aggDecl[E any] struct {
	name  string
	build func() (aggDef, error)
}

// Grace sets how long after a window's end (in stream time) events are still accepted. It must be
// stated, even as zero: lateness is a decision, not a default.
func (a *AggregateSet[E]) Grace(d time.Duration) *AggregateSet[E] {
	a.grace, a.graceSet = d, true
	return a
}

// Emit sets when totals are emitted (default FinalOnly).
func (a *AggregateSet[E]) Emit(e Emission) *AggregateSet[E] { a.emit = e; return a }

// Types restricts the set to events of the given types (see Source.EventType).
func (a *AggregateSet[E]) Types(types ...string) *AggregateSet[E] {
	a.types = append(a.types, types...)
	return a
}

// Where restricts the set to the events f returns true for. It runs on every event of the source
// that the set's Types take; a panic in it sends the event to the dead-letter topic, as any user
// code's.
func (a *AggregateSet[E]) Where(f func(E) bool) *AggregateSet[E] { a.where = f; return a }

// By makes the set a rollup: its windows are keyed by key(e), not by the source's entity, so
// that it totals, say, all devices of a region. dimension names what the key is ("region"): the
// tag key of its series in the OpenTSDB API and the label of its rows everywhere else. Each
// source partition totals its share of a window, and the key's owner merges those partial
// totals (docs/DESIGN.md, Rollups), so a key as hot as a whole fleet costs no more than any
// other. An event whose key is "" is left out of the set; one whose key is longer than the
// entity limit (Builder.Limits) goes to the dead-letter topic.
//
// Every aggregation of a rollup set must merge (all built-in ones do; a custom one needs
// UserDefined.Merge), and it emits FinalOnly or EarlyEvery: a total per update of a key that
// takes a whole fleet's events would be a message per event.
func (a *AggregateSet[E]) By(dimension string, key func(E) string) *AggregateSet[E] {
	a.rollupDecl().dimension, a.rollup.key = dimension, key
	return a
}

// Global makes the set a rollup with one key for all events (plan.GlobalKey, "all"): fleet-wide
// totals, read as a series without tags in the OpenTSDB API. See By.
func (a *AggregateSet[E]) Global() *AggregateSet[E] {
	a.rollupDecl().global = true
	return a
}

func (a *AggregateSet[E]) rollupDecl() *rollupDecl[E] {
	if a.rollup == nil {
		a.rollup = &rollupDecl[E]{}
	}
	a.rollup.calls++
	return a.rollup
}

func (a *AggregateSet[E]) add(name string, build func() (aggDef, error)) *AggregateSet[E] {
	a.aggs = append(a.aggs, aggDecl[E]{name: name, build: build})
	return a
}

// Count counts the events in each window.
func (a *AggregateSet[E]) Count(name string) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return countDef(name), nil })
}

// Sum adds up the numeric field (Go field name or json tag) of E.
func (a *AggregateSet[E]) Sum(name, field string) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDef(name, field, numericField[E], accum.Sum) })
}

// SumOf adds up f(e).
func (a *AggregateSet[E]) SumOf(name string, f func(E) float64) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDefOf(name, f, accum.Sum), nil })
}

// Min keeps the smallest value of the numeric field.
func (a *AggregateSet[E]) Min(name, field string) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDef(name, field, numericField[E], accum.Min) })
}

// MinOf keeps the smallest f(e).
func (a *AggregateSet[E]) MinOf(name string, f func(E) float64) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDefOf(name, f, accum.Min), nil })
}

// Max keeps the largest value of the numeric field.
func (a *AggregateSet[E]) Max(name, field string) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDef(name, field, numericField[E], accum.Max) })
}

// MaxOf keeps the largest f(e).
func (a *AggregateSet[E]) MaxOf(name string, f func(E) float64) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDefOf(name, f, accum.Max), nil })
}

// Mean averages the numeric field.
func (a *AggregateSet[E]) Mean(name, field string) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDef(name, field, numericField[E], accum.Mean) })
}

// MeanOf averages f(e).
func (a *AggregateSet[E]) MeanOf(name string, f func(E) float64) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDefOf(name, f, accum.Mean), nil })
}

// Last keeps the numeric field of the event with the latest event time (on a tie, the one applied
// last, which is the later offset of a partition).
func (a *AggregateSet[E]) Last(name, field string) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDef(name, field, numericField[E], accum.Last) })
}

// LastOf keeps f(e) of the event with the latest event time.
func (a *AggregateSet[E]) LastOf(name string, f func(E) float64) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) { return floatDefOf(name, f, accum.Last), nil })
}

// Distinct estimates the number of distinct values of the field (string, integer or []byte) with a
// HyperLogLog sketch (about 0.8% standard error).
func (a *AggregateSet[E]) Distinct(name, field string) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) {
		f, err := keyField[E](field)
		if err != nil {
			return aggDef{}, err
		}
		return distinctDef(name, func(e event) []byte { return f(e.(E)) }), nil
	})
}

// DistinctOf estimates the number of distinct f(e).
func (a *AggregateSet[E]) DistinctOf(name string, f func(E) []byte) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) {
		return distinctDef(name, func(e event) []byte { return f(e.(E)) }), nil
	})
}

// Quantiles estimates the given quantiles (each in [0, 1]) of the numeric field with a DDSketch of
// 1% relative accuracy.
func (a *AggregateSet[E]) Quantiles(name, field string, qs ...float64) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) {
		f, err := numericField[E](field)
		if err != nil {
			return aggDef{}, err
		}
		return quantilesDef(name, func(e event) float64 { return f(e.(E)) }, qs)
	})
}

// QuantilesOf estimates the given quantiles of f(e).
func (a *AggregateSet[E]) QuantilesOf(name string, f func(E) float64, qs ...float64) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) {
		return quantilesDef(name, func(e event) float64 { return f(e.(E)) }, qs)
	})
}

// CustomAggregation is a user-defined aggregation over events E; UserDefined implements it.
type CustomAggregation[E any] interface {
	def(name string) (aggDef, error)
}

// Custom adds a user-defined aggregation (see UserDefined).
func (a *AggregateSet[E]) Custom(name string, agg CustomAggregation[E]) *AggregateSet[E] {
	return a.add(name, func() (aggDef, error) {
		if agg == nil {
			return aggDef{}, errors.New("custom aggregation is nil")
		}
		return agg.def(name)
	})
}

// Coarser declares a set holding a's totals over longer windows: tumbling windows of size, a
// multiple of a's tumbling window, each holding exactly the events that a's windows inside it
// took. It has a's key (entity, By or Global), Types, Where, grace and aggregations (those named
// in keep, or all), all declared on a (a coarser set declares none of its own), and may Emit
// otherwise. An event a judges late is left out of the coarser window too, even when that window
// is still open, so that each coarser total is the merge of a's totals inside it: a count or sum
// is their sum, a min their min, a max their max, a last the last one's, a mean, distinct count
// or quantile sketch what merging their accumulators gives. The query side reads the coarser set
// for a panel whose buckets are multiples of size (OpenTSDB's downsampling): an hour of minute
// windows is one row.
func (a *AggregateSet[E]) Coarser(name string, size time.Duration, keep ...string) *AggregateSet[E] {
	c := a.src.Aggregate(name, windows.Tumbling(size))
	c.finer, c.keep = a, keep
	return c
}

// fromFiner is the coarser set a as it compiles: a copy (compiling changes no declaration) with
// what its finer set declared, and what cannot be.
func (a *AggregateSet[E]) fromFiner(where string) (*AggregateSet[E], []error) {
	f := a.finer
	if f.finer != nil { // a chain: the finer set's declarations are its own finer set's
		f, _ = f.fromFiner(where) // what is wrong with it, its own compile says
	}
	var errs []error
	if len(a.aggs) > 0 || a.where != nil || len(a.types) > 0 || a.rollup != nil || a.graceSet {
		errs = append(errs, fmt.Errorf("%s: a coarser set of %q takes its aggregations, Where, Types, By and Grace from it: declare them there", where, f.setName))
	}
	switch fs := f.spec; {
	case fs.Kind() != windows.KindTumbling:
		errs = append(errs, fmt.Errorf("%s: Coarser needs a set of tumbling windows, and %q has %s", where, f.setName, fs))
	case fs.Size() <= 0: // the finer set says what is wrong with its window
	case a.spec.Size() <= fs.Size() || a.spec.Size()%fs.Size() != 0:
		errs = append(errs, fmt.Errorf("%s: its window (%v) is not a multiple of %q's (%v) larger than it", where,
			time.Duration(a.spec.Size())*time.Millisecond, f.setName, time.Duration(fs.Size())*time.Millisecond))
	}
	c := *a
	c.finer, c.keep = nil, nil
	c.where, c.types, c.rollup, c.grace, c.graceSet, c.aggs = f.where, f.types, f.rollup, f.grace, f.graceSet, f.aggs
	if a.keep != nil {
		c.aggs = nil
		for _, k := range a.keep {
			i := slices.IndexFunc(f.aggs, func(d aggDecl[E]) bool { return d.name == k })
			if i < 0 {
				errs = append(errs, fmt.Errorf("%s: Coarser keeps %q, which %q does not declare", where, k, f.setName))
				continue
			}
			c.aggs = append(c.aggs, f.aggs[i])
		}
	}
	return &c, errs
}

func (a *AggregateSet[E]) finerName() string {
	if a.finer == nil {
		return ""
	}
	return a.finer.setName
}

// compileRollup checks what By or Global declared.
func (a *AggregateSet[E]) compileRollup(where string) (*plan.Rollup, []error) {
	r := a.rollup
	var errs []error
	switch {
	case r.calls > 1:
		errs = append(errs, fmt.Errorf("%s: By or Global called %d times: a set has one key", where, r.calls))
	case r.global:
	case r.dimension == "":
		errs = append(errs, fmt.Errorf("%s: By: the dimension has no name (By(\"region\", ...))", where))
	case r.key == nil:
		errs = append(errs, fmt.Errorf("%s: By(%q): the key func is nil", where, r.dimension))
	case !validDimension(r.dimension):
		errs = append(errs, fmt.Errorf("%s: By(%q): a dimension name is letters, digits, '_', '-', '.' and '/' (it is an OpenTSDB tag key)", where, r.dimension))
	case r.dimension == EntityDimension:
		errs = append(errs, fmt.Errorf("%s: By(%q): %q names the source's entity; give the rollup's dimension another name", where, r.dimension, EntityDimension))
	case r.dimension == "quantile" || r.dimension == "final":
		errs = append(errs, fmt.Errorf("%s: By(%q): the OpenTSDB API uses the tag key %q itself; give the rollup's dimension another name", where, r.dimension, r.dimension))
	}
	switch {
	case a.spec.Kind() == windows.KindSession:
		errs = append(errs, fmt.Errorf("%s: a rollup set cannot have session windows (a session is one entity's activity)", where))
	case a.emit.mode == EmitEveryUpdate:
		errs = append(errs, fmt.Errorf("%s: a rollup set cannot emit EveryUpdate (a total per event of all its entities); use EarlyEvery", where))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if r.global {
		return &plan.Rollup{}, nil
	}
	key := r.key
	return &plan.Rollup{Dimension: r.dimension, Key: func(e event) string { return key(e.(E)) }}, nil
}

// EntityDimension is the dimension name of entity sets: the tag key of their series in the
// OpenTSDB API. A rollup's dimension cannot take it.
const EntityDimension = "entity"

// validDimension reports whether d can be an OpenTSDB tag key.
func validDimension(d string) bool {
	for _, c := range d {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/'
		if !ok {
			return false
		}
	}
	return d != ""
}

func (a *AggregateSet[E]) name() string        { return a.setName }
func (a *AggregateSet[E]) sourceTopic() string { return a.src.topic }

func (a *AggregateSet[E]) compile(source int) (*plan.Set, error) {
	var errs []error
	where := fmt.Sprintf("aggregate set %q", a.setName)
	if a.finer != nil {
		c, cerrs := a.fromFiner(where)
		def, err := c.compile(source)
		if len(cerrs) > 0 {
			return nil, errors.Join(append(cerrs, err)...)
		}
		return def, err
	}
	if a.setName == "" {
		errs = append(errs, fmt.Errorf("aggregate set on %q: name is empty", a.src.topic))
	} else if !utf8.ValidString(a.setName) {
		// Names appear in JSON and metric names, and the key index keeps one byte that is no
		// UTF-8 (schema.KeyIndexEverySet) for itself.
		errs = append(errs, fmt.Errorf("%s: the name is not valid UTF-8", where))
	}
	if err := a.spec.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("%s: window: %w", where, err))
	}
	if !a.graceSet {
		errs = append(errs, fmt.Errorf("%s: Grace is not stated (state it, even Grace(0))", where))
	} else if a.grace < 0 {
		errs = append(errs, fmt.Errorf("%s: Grace is negative (%v)", where, a.grace))
	}
	if a.emit == (Emission{}) {
		a.emit = FinalOnly() // the zero Emission is the default, as documented
	}
	switch a.emit.mode {
	case EmitFinal, EmitEveryUpdate:
	case EmitEarly:
		if a.emit.every <= 0 {
			errs = append(errs, fmt.Errorf("%s: Emit: EarlyEvery needs a positive interval, got %v", where, a.emit.every))
		}
	default:
		errs = append(errs, fmt.Errorf("%s: Emit: unknown mode %d", where, a.emit.mode))
	}
	if len(a.aggs) == 0 {
		errs = append(errs, fmt.Errorf("%s: no aggregation declared", where))
	}
	def := &plan.Set{Name: a.setName, Source: source, Window: a.spec, Grace: a.grace.Milliseconds(),
		Emit: a.emit.mode, EmitEvery: a.emit.every}
	if a.where != nil {
		f := a.where
		def.Where = func(e event) bool { return f(e.(E)) }
	}
	if a.rollup != nil {
		r, err := a.compileRollup(where)
		errs = append(errs, err...)
		def.Rollup = r
	}
	if len(a.types) > 0 {
		def.Types = map[string]bool{}
		for _, t := range a.types {
			def.Types[t] = true
		}
	}
	seen := map[string]bool{}
	for _, d := range a.aggs {
		if d.name == "" {
			errs = append(errs, fmt.Errorf("%s: an aggregation has an empty name", where))
			continue
		}
		if seen[d.name] {
			errs = append(errs, fmt.Errorf("%s: aggregation %q declared twice", where, d.name))
			continue
		}
		seen[d.name] = true
		ad, err := d.build()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: aggregation %q: %w", where, d.name, err))
			continue
		}
		if ad.NoMerge && (def.Rollup != nil || a.spec.Kind() == windows.KindSession) {
			what := "a rollup set"
			if def.Rollup == nil {
				what = "a set of session windows"
			}
			errs = append(errs, fmt.Errorf("%s: aggregation %q cannot merge (UserDefined.Merge is nil), and %s merges its accumulators", where, d.name, what))
		}
		def.Aggs = append(def.Aggs, ad)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return def, nil
}
