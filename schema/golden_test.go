package schema

import (
	"bytes"
	"testing"

	"github.com/abacus-stream/abacus/internal/golden"
	"github.com/abacus-stream/abacus/totals"
)

// TestGoldenCells pins what the sinks write and queries read (format Format of the tables): an
// aggregate row, a cell value of every kind, a fact row and qualifier, a key index row.
func TestGoldenCells(t *testing.T) {
	var b bytes.Buffer
	line := func(what string, v []byte) {
		b.WriteString(what + " ")
		b.WriteString(bytesHex(v))
		b.WriteString("\n")
	}
	line("aggregate-row", AggregateRow("dev-1", "minute", 1_767_225_600_000, 16))
	for _, v := range []totals.Value{
		{Name: "count", Kind: totals.KindInt, Int: 42},
		{Name: "mean", Kind: totals.KindFloat, Float: 21.5},
		{Name: "q", Kind: totals.KindQuantiles, Quantiles: []totals.Quantile{{Q: 0.5, Value: 21}}},
		{Name: "custom", Kind: totals.KindBytes, Bytes: []byte{1, 2, 3}},
	} {
		c, err := AppendCellValue(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		line("cell-"+v.Name, c)
	}
	line("fact-row", FactRow("dev-1", 1_767_225_600_123, 16))
	line("fact-qualifier", AppendFactQualifier(nil, "reading", 3, 41))
	line("key-index-row", KeyIndexRow("minute", "dev-1"))
	golden.CheckText(t, "cells-v"+Format, "HBase rows, qualifiers and cell values, format "+Format+" (hex)", b.String())
}

func bytesHex(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
