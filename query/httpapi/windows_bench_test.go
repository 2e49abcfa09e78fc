package httpapi

import (
	"testing"
	"time"

	"github.com/abacus-stream/abacus/query"
	"github.com/abacus-stream/abacus/totals"
)

// BenchmarkWindowsJSON writes a day of minute windows with a count, a float and three quantiles,
// as the windows API writes a page's entity.
func BenchmarkWindowsJSON(b *testing.B) {
	var ws []query.Window
	start := time.UnixMilli(1_700_000_000_000)
	for i := range 1440 {
		s := start.Add(time.Duration(i) * time.Minute)
		ws = append(ws, query.Window{Entity: "e", Set: "s", Start: s, End: s.Add(time.Minute), Final: true, Revision: 1,
			Values: map[string]totals.Value{
				"count":    {Name: "count", Kind: totals.KindInt, Int: int64(i)},
				"max_temp": {Name: "max_temp", Kind: totals.KindFloat, Float: 20 + float64(i)/7},
				"temp_q": {Name: "temp_q", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{
					{Q: 0.5, Value: 21.5}, {Q: 0.95, Value: 23.25}, {Q: 0.99, Value: float64(i) / 3}}},
			}})
	}
	c := query.ColumnsOf("e", "s", ws)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = appendWindowsJSON(buf[:0], c, false)
	}
	b.SetBytes(int64(len(buf)))
}
