package query

import (
	"encoding/binary"
	"testing"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
	"github.com/abacus-stream/abacus/totals"
)

// BenchmarkDecodeRows decodes a day of one entity's minute windows as a read of its table does
// (rowDecoder over the rows' cells): a meta cell, a float and three quantiles each.
func BenchmarkDecodeRows(b *testing.B) {
	prefix := schema.AggregatePrefix("device-1", "minute", 16)
	type row struct {
		key   []byte
		cells []store.Cell
	}
	var rows []row
	start := int64(1_700_000_000_000)
	for i := range 1440 {
		s := start + int64(i)*60_000
		key := binary.BigEndian.AppendUint64(clone(prefix), schema.ReverseTime(s))
		q := totals.Value{Name: "temp_q", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{
			{Q: 0.5, Value: 21.5}, {Q: 0.95, Value: 23.25}, {Q: 0.99, Value: float64(i) / 3}}}
		f := totals.Value{Name: "max_temp", Kind: totals.KindFloat, Float: 20 + float64(i)/7}
		rows = append(rows, row{key, []store.Cell{
			{Row: key, Qualifier: []byte(schema.MetaQualifier), Timestamp: s + 60_000, Value: schema.AppendMeta(nil, true, 1)},
			{Row: key, Qualifier: []byte("max_temp"), Timestamp: s + 60_000, Value: cellValue(b, f)},
			{Row: key, Qualifier: []byte("temp_q"), Timestamp: s + 60_000, Value: cellValue(b, q)},
		}})
	}
	b.ReportAllocs()
	for b.Loop() {
		dec := rowDecoder{prefix: prefix, cols: newColumns("device-1", "minute", []string{"max_temp", "temp_q"})}
		for _, r := range rows {
			if err := dec.add(r.key, r.cells); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func cellValue(b *testing.B, v totals.Value) []byte {
	out, err := schema.AppendCellValue(nil, v)
	if err != nil {
		b.Fatal(err)
	}
	return out
}
