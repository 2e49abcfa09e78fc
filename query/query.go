// Package query reads window aggregates back for dashboards: from the aggregate table that the
// aggregates sink writes (HBase or the embedded cell store) and, for windows still open, from the
// processors' live state. It serves them through a Go API and an HTTP/JSON API with a dashboard.
//
// It only reads: it must never write a cell or change a group's state.
package query

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/abacus-stream/abacus/processors/totals"
	"github.com/abacus-stream/abacus/sinks"
)

// Window is one entity's aggregates over one window of an aggregate set.
type Window struct {
	Entity   string
	Set      string
	Start    time.Time // inclusive
	End      time.Time // exclusive
	Final    bool      // false while the window may still change
	Revision uint64    // events applied to the window when this total was emitted
	Live     bool      // read from the processors' state, not yet from the table
	Values   map[string]totals.Value
}

// Options select windows by start time and bound how many come back.
type Options struct {
	// From and To bound the window start: From <= start < To. Zero means unbounded.
	From, To time.Time
	// Limit is the most windows per entity; 0 means no limit.
	Limit int
	// OldestFirst returns windows in ascending start order; the default is newest first.
	OldestFirst bool
	// NoLive leaves out still-open windows read from the processors.
	NoLive bool
}

// LiveSource gives the still-open windows of an entity, from the processors' state (goka views).
type LiveSource interface {
	OpenWindows(ctx context.Context, set, entity string) ([]Window, error)
}

// Reader answers window queries over one aggregate table.
type Reader struct {
	Store       sinks.Reader
	Table       string
	Family      string
	SaltBuckets int
	// Live, when set, adds windows still open in the processors.
	Live LiveSource
}

// ErrInvalid is wrapped by errors about the request rather than the store.
var ErrInvalid = errors.New("invalid query")

// Windows returns the windows of one entity of a set, newest first unless asked otherwise.
func (r *Reader) Windows(ctx context.Context, set, entity string, o Options) ([]Window, error) {
	if set == "" || entity == "" {
		return nil, fmt.Errorf("%w: set and entity are required", ErrInvalid)
	}
	if !o.From.IsZero() && !o.To.IsZero() && !o.From.Before(o.To) {
		return nil, fmt.Errorf("%w: from %s is not before to %s", ErrInvalid, o.From.Format(time.RFC3339), o.To.Format(time.RFC3339))
	}
	if o.Limit < 0 {
		return nil, fmt.Errorf("%w: negative limit %d", ErrInvalid, o.Limit)
	}
	prefix := sinks.AggregatePrefix(entity, set, r.SaltBuckets)
	spec := sinks.ScanSpec{Table: r.Table, Family: r.Family, Reversed: o.OldestFirst}
	// Rows sort by reversed start: the newest window first. Start <= To-1 is the lower row bound.
	spec.Start = prefix
	if !o.To.IsZero() {
		spec.Start = binary.BigEndian.AppendUint64(clone(prefix), sinks.ReverseTime(o.To.UnixMilli()-1))
	}
	if !o.From.IsZero() {
		spec.Stop = binary.BigEndian.AppendUint64(clone(prefix), sinks.ReverseTime(o.From.UnixMilli()-1))
	} else {
		spec.Stop = prefixEnd(prefix)
	}
	var (
		out     []Window
		scanErr error
	)
	err := r.Store.Scan(ctx, spec, func(row []byte, cells []sinks.Cell) bool {
		w, err := windowFromRow(row, cells)
		if err != nil {
			scanErr = err
			return false
		}
		out = append(out, w)
		// Merging live windows only adds or replaces, so no stored window past the limit can come
		// back into it.
		return o.Limit == 0 || len(out) < o.Limit
	})
	if err == nil {
		err = scanErr
	}
	if err != nil {
		return nil, fmt.Errorf("query: windows of %s in %s: %w", entity, set, err)
	}
	if r.Live != nil && !o.NoLive {
		live, err := r.Live.OpenWindows(ctx, set, entity)
		if err != nil {
			return nil, fmt.Errorf("query: live windows of %s in %s: %w", entity, set, err)
		}
		out = merge(out, live, o)
	}
	if o.Limit > 0 && len(out) > o.Limit {
		out = out[:o.Limit]
	}
	return out, nil
}

// Latest returns the n newest windows of an entity.
func (r *Reader) Latest(ctx context.Context, set, entity string, n int) ([]Window, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: n must be positive, got %d", ErrInvalid, n)
	}
	return r.Windows(ctx, set, entity, Options{Limit: n})
}

// Many returns the windows of several entities, each selected by o.
func (r *Reader) Many(ctx context.Context, set string, entities []string, o Options) (map[string][]Window, error) {
	if len(entities) == 0 {
		return nil, fmt.Errorf("%w: no entity given", ErrInvalid)
	}
	out := make(map[string][]Window, len(entities))
	for _, e := range entities {
		ws, err := r.Windows(ctx, set, e, o)
		if err != nil {
			return nil, err
		}
		out[e] = ws
	}
	return out, nil
}

func windowFromRow(row []byte, cells []sinks.Cell) (Window, error) {
	entity, set, start, err := sinks.ParseAggregateRow(row)
	if err != nil {
		return Window{}, err
	}
	w := Window{Entity: entity, Set: set, Start: time.UnixMilli(start), Values: map[string]totals.Value{}}
	for _, c := range cells {
		w.End = time.UnixMilli(c.Timestamp)
		if string(c.Qualifier) == sinks.MetaQualifier {
			if w.Final, w.Revision, err = sinks.ParseMeta(c.Value); err != nil {
				return Window{}, err
			}
			continue
		}
		v, err := sinks.ParseCellValue(string(c.Qualifier), c.Value)
		if err != nil {
			return Window{}, err
		}
		w.Values[v.Name] = v
	}
	return w, nil
}

// merge adds live windows that are newer than (or missing from) the stored ones, keeping order.
func merge(stored, live []Window, o Options) []Window {
	byStart := make(map[int64]int, len(stored))
	for i, w := range stored {
		byStart[w.Start.UnixMilli()] = i
	}
	for _, lw := range live {
		if (!o.From.IsZero() && lw.Start.Before(o.From)) || (!o.To.IsZero() && !lw.Start.Before(o.To)) {
			continue
		}
		lw.Live = true
		if i, ok := byStart[lw.Start.UnixMilli()]; ok {
			if !stored[i].Final && lw.Revision > stored[i].Revision {
				stored[i] = lw
			}
			continue
		}
		stored = append(stored, lw)
	}
	sort.SliceStable(stored, func(i, j int) bool {
		if o.OldestFirst {
			return stored[i].Start.Before(stored[j].Start)
		}
		return stored[i].Start.After(stored[j].Start)
	})
	return stored
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func prefixEnd(p []byte) []byte {
	end := clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Number returns a value as a float for charts: ints and floats as they are, quantiles as their
// median-most quantile, bytes as NaN.
func Number(v totals.Value) float64 {
	switch v.Kind {
	case totals.KindInt:
		return float64(v.Int)
	case totals.KindFloat:
		return v.Float
	case totals.KindQuantiles:
		best, dist := math.NaN(), math.Inf(1)
		for _, q := range v.Quantiles {
			if d := math.Abs(q.Q - 0.5); d < dist {
				best, dist = q.Value, d
			}
		}
		return best
	}
	return math.NaN()
}
