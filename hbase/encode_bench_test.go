package hbase

import (
	"fmt"
	"testing"
)

// BenchmarkAppendMultiRequest measures the client-side cost of encoding one full Multi request
// (2,048 one-cell Puts with 100-byte values over 16 regions), without a server.
func BenchmarkAppendMultiRequest(b *testing.B) {
	value := make([]byte, 100)
	var ms []*Mutation
	req := &multiRequest{}
	for r := range 16 {
		ra := regionActions{r: &region{name: fmt.Appendf(nil, "t,%x,1.0123456789abcdef0123456789abcdef.", r)}}
		for i := range 128 {
			ra.idx = append(ra.idx, len(ms))
			ms = append(ms, NewPut("t", fmt.Appendf(nil, "%x-%09d", r, i)).Add("f", []byte("q"), int64(i), value))
		}
		req.regions = append(req.regions, ra)
	}
	b.ReportAllocs()
	for b.Loop() {
		p, c := getBuf(), getBuf()
		*p, *c = appendMultiRequest(*p, *c, ms, req)
		putBuf(p)
		putBuf(c)
	}
	b.ReportMetric(float64(len(ms))*float64(b.N)/b.Elapsed().Seconds(), "cells/s")
}

// BenchmarkParseScanResponse measures decoding a 1,000-row scan response with one 100-byte cell
// per row from a KeyValue cell block.
func BenchmarkParseScanResponse(b *testing.B) {
	value := make([]byte, 100)
	var resp, cells []byte
	for i := range 1000 {
		resp = appendVarintField(resp, 1, 1)
		cells = appendKeyValue(cells, fmt.Appendf(nil, "%x-%09d", i%16, i), "f", []byte("q"), int64(i), typePut, value)
	}
	resp = appendVarintField(resp, 2, 1)
	resp = appendBoolField(resp, 8, true)
	b.ReportAllocs()
	for b.Loop() {
		sr, err := parseScanResponse(resp, cells)
		if err != nil || len(sr.results) != 1000 {
			b.Fatal(err)
		}
	}
	b.ReportMetric(1000*float64(b.N)/b.Elapsed().Seconds(), "cells/s")
}
