package sinks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/abacus-stream/abacus/processors/totals"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AggregatesEncoder turns each totals record (processors/totals) into the cells of one window row:
//
//	row       = salt | entity | aggregate set | reversed window start   (AggregateRow)
//	qualifier = aggregate name, one cell per aggregate, plus MetaQualifier
//	timestamp = window end (exclusive, ms): every firing of a window rewrites the same cells
//	value     = the aggregate's value in the cell encoding below
//
// The cells hold absolute totals, so a replayed totals record rewrites identical cells.
//
// Cell value encoding (fixed widths, readable by HBase's Java Bytes.toLong / toDouble after the
// kind byte):
//
//	kind 1 int:       1 byte 0x01, 8 bytes int64 big-endian
//	kind 2 float:     1 byte 0x02, 8 bytes IEEE 754 float64 big-endian
//	kind 3 quantiles: 1 byte 0x03, then per quantile 8 bytes q and 8 bytes value (float64 BE)
//	kind 4 bytes:     1 byte 0x04, the bytes
//
// MetaQualifier holds 1 byte flags (bit 0: final) and 8 bytes revision (uint64 BE).
type AggregatesEncoder struct {
	Table       string
	Family      string
	SaltBuckets int
}

// MetaQualifier is the qualifier of a window row's final flag and revision. Aggregate names may not
// start with '_', so it never meets one.
const MetaQualifier = "_meta"

// Encode implements Encoder.
func (a *AggregatesEncoder) Encode(rec *kgo.Record, dst []Cell) ([]Cell, error) {
	r, err := totals.Decode(rec.Value)
	if err != nil {
		return dst, fmt.Errorf("aggregates: %w", err)
	}
	if r.Entity == "" || r.End <= r.Start || r.Start < 0 {
		return dst, fmt.Errorf("aggregates: window of entity %q from %d to %d is not valid", r.Entity, r.Start, r.End)
	}
	row := AggregateRow(r.Entity, r.Set, r.Start, a.SaltBuckets)
	fam := []byte(a.Family)
	for _, v := range r.Values {
		if len(v.Name) == 0 || v.Name[0] == '_' {
			return dst, fmt.Errorf("aggregates: aggregate name %q is reserved", v.Name)
		}
		val, err := AppendCellValue(nil, v)
		if err != nil {
			return dst, fmt.Errorf("aggregates: %s: %w", v.Name, err)
		}
		dst = append(dst, Cell{Table: a.Table, Row: row, Family: fam, Qualifier: []byte(v.Name), Timestamp: r.End, Value: val})
	}
	var flags byte
	if r.Final {
		flags = 1
	}
	meta := binary.BigEndian.AppendUint64([]byte{flags}, r.Revision)
	return append(dst, Cell{Table: a.Table, Row: row, Family: fam, Qualifier: []byte(MetaQualifier), Timestamp: r.End, Value: meta}), nil
}

// AppendCellValue appends v in the cell value encoding.
func AppendCellValue(b []byte, v totals.Value) ([]byte, error) {
	b = append(b, byte(v.Kind))
	switch v.Kind {
	case totals.KindInt:
		return binary.BigEndian.AppendUint64(b, uint64(v.Int)), nil
	case totals.KindFloat:
		return binary.BigEndian.AppendUint64(b, math.Float64bits(v.Float)), nil
	case totals.KindQuantiles:
		for _, q := range v.Quantiles {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(q.Q))
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(q.Value))
		}
		return b, nil
	case totals.KindBytes:
		return append(b, v.Bytes...), nil
	}
	return nil, fmt.Errorf("unknown value kind %d", v.Kind)
}

// ParseCellValue reads a value written by AppendCellValue.
func ParseCellValue(name string, b []byte) (totals.Value, error) {
	if len(b) == 0 {
		return totals.Value{}, errors.New("sinks: empty aggregate cell")
	}
	v := totals.Value{Name: name, Kind: totals.Kind(b[0])}
	b = b[1:]
	switch v.Kind {
	case totals.KindInt, totals.KindFloat:
		if len(b) != 8 {
			return v, fmt.Errorf("sinks: aggregate cell %s: %d value bytes, want 8", name, len(b))
		}
		x := binary.BigEndian.Uint64(b)
		if v.Kind == totals.KindInt {
			v.Int = int64(x)
		} else {
			v.Float = math.Float64frombits(x)
		}
	case totals.KindQuantiles:
		if len(b)%16 != 0 {
			return v, fmt.Errorf("sinks: aggregate cell %s: %d quantile bytes", name, len(b))
		}
		for ; len(b) > 0; b = b[16:] {
			v.Quantiles = append(v.Quantiles, totals.Quantile{
				Q: math.Float64frombits(binary.BigEndian.Uint64(b)), Value: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))})
		}
	case totals.KindBytes:
		v.Bytes = append([]byte(nil), b...)
	default:
		return v, fmt.Errorf("sinks: aggregate cell %s: unknown kind %d", name, v.Kind)
	}
	return v, nil
}

// ParseMeta reads a MetaQualifier cell.
func ParseMeta(b []byte) (final bool, revision uint64, err error) {
	if len(b) != 9 {
		return false, 0, fmt.Errorf("sinks: meta cell of %d bytes, want 9", len(b))
	}
	return b[0]&1 == 1, binary.BigEndian.Uint64(b[1:]), nil
}
