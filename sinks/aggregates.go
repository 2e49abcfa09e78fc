package sinks

import (
	"errors"
	"fmt"

	"github.com/abacus-stream/abacus/deadletter"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AggregatesEncoder turns each totals record (package totals) into the cells of one window row, as
// package schema lays them out:
//
//	row       = salt | entity | aggregate set | reversed window start   (schema.AggregateRow)
//	qualifier = aggregate name, one cell per aggregate, plus schema.MetaQualifier
//	timestamp = window end (exclusive, ms): every firing of a window rewrites the same cells
//	value     = the aggregate's value (schema.AppendCellValue)
//
// The cells hold absolute totals, so a replayed totals record rewrites identical cells.
type AggregatesEncoder struct {
	Table       string
	Family      string
	SaltBuckets int
}

// Check reports a layout the encoder cannot write with; NewFlushThenCommit calls it, so a sink
// with a zero encoder fails at start instead of dead-lettering every record.
func (a *AggregatesEncoder) Check() error {
	return checkLayout("aggregates encoder", a.Table, a.Family, a.SaltBuckets)
}

func checkLayout(what, table, family string, buckets int) error {
	var errs []error
	if table == "" || family == "" {
		errs = append(errs, fmt.Errorf("%s: Table and Family are required", what))
	}
	if buckets < 1 || buckets > schema.MaxSaltBuckets {
		errs = append(errs, fmt.Errorf("%s: SaltBuckets %d outside 1..%d", what, buckets, schema.MaxSaltBuckets))
	}
	return errors.Join(errs...)
}

// Encode implements Encoder.
func (a *AggregatesEncoder) Encode(rec *kgo.Record, dst []store.Cell) ([]store.Cell, error) {
	r, err := totals.Decode(rec.Value)
	if err != nil {
		return dst, deadletter.Errorf(deadletter.Invalid, "aggregates: %w", err)
	}
	if r.Entity == "" || r.End <= r.Start || r.Start < 0 {
		return dst, deadletter.Errorf(deadletter.Invalid, "aggregates: window of entity %q from %d to %d is not valid", r.Entity, r.Start, r.End)
	}
	row := schema.AggregateRow(r.Entity, r.Set, r.Start, a.SaltBuckets)
	fam := []byte(a.Family)
	for _, v := range r.Values {
		if err := schema.ValidAggregateName(v.Name); err != nil {
			return dst, deadletter.Errorf(deadletter.Invalid, "aggregates: %w", err)
		}
		val, err := schema.AppendCellValue(nil, v)
		if err != nil {
			return dst, deadletter.Errorf(deadletter.Invalid, "aggregates: %s: %w", v.Name, err)
		}
		dst = append(dst, store.Cell{Table: a.Table, Row: row, Family: fam, Qualifier: []byte(v.Name), Timestamp: r.End, Value: val})
	}
	meta := schema.AppendMeta(nil, r.Final, r.Revision)
	return append(dst, store.Cell{Table: a.Table, Row: row, Family: fam, Qualifier: []byte(schema.MetaQualifier), Timestamp: r.End, Value: meta}), nil
}
