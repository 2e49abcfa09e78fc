package hbase

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// seedScanFrame builds a well-formed Scan response frame: header with a cell block, ScanResponse
// with cells_per_result, and two KeyValue cells.
func seedScanFrame() []byte {
	hdr := appendVarintField(nil, 1, 7)
	var cells []byte
	cells = appendKeyValue(cells, []byte("row"), "f", []byte("q"), 42, typePut, []byte("value"))
	cells = appendKeyValue(cells, []byte("row"), "f", []byte("r"), 43, typeDelete, nil)
	hdr = appendMessage(hdr, 3, func(b []byte) []byte { return appendVarintField(b, 1, uint64(len(cells))) })
	var resp []byte
	resp = appendVarintField(resp, 1, 2)
	resp = appendVarintField(resp, 2, 99)
	resp = appendBoolField(resp, 3, true)
	resp = appendBoolField(resp, 8, false)
	frame := protowire.AppendBytes(nil, hdr)
	frame = protowire.AppendBytes(frame, resp)
	return append(frame, cells...)
}

// FuzzResponseDecoding feeds arbitrary bytes to every response decoder: none may panic, whatever
// the server (or a corrupt network) sends.
func FuzzResponseDecoding(f *testing.F) {
	f.Add(seedScanFrame())
	exc := appendVarintField(nil, 1, 3)
	exc = appendMessage(exc, 2, func(b []byte) []byte {
		b = appendStringField(b, 1, "org.apache.hadoop.hbase.NotServingRegionException")
		return appendStringField(b, 2, "region x is not online")
	})
	f.Add(protowire.AppendBytes(nil, exc))
	multi := appendMessage(nil, 1, func(b []byte) []byte {
		b = appendMessage(b, 1, func(b []byte) []byte { return appendVarintField(b, 1, 0) })
		return appendMessage(b, 1, func(b []byte) []byte {
			b = appendVarintField(b, 1, 1)
			return appendNameBytesPair(b, 3, "org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException", []byte("nope"))
		})
	})
	f.Add(multi)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if fr, err := parseResponseFrame(b); err == nil {
			_, _ = parseScanResponse(fr.param, fr.cells)
			cr := cellReader{b: fr.cells}
			_, _ = parseResult(fr.param, &cr)
		}
		_, _ = parseScanResponse(b, b)
		cr := cellReader{b: b}
		for {
			if _, err := cr.next(); err != nil {
				break
			}
		}
		cr = cellReader{b: b}
		if res, err := parseResult(b, &cr); err == nil {
			_, _ = regionFromMeta(&res)
		}
		c := &Client{}
		req := &multiRequest{addr: "x", regions: []regionActions{{r: &region{}, idx: []int{0, 1}}, {r: &region{}, idx: []int{2}}}}
		errs := make([]error, 3)
		_ = c.readMultiResponse(b, nil, req, errs)
		_, _ = parseTableSchema(b)
		_, _, _ = parseProcedureResult(b)
		_, _ = parseMetaLocations(b)
		_, _ = parseRegionInfo(b)
		_, _ = parseExceptionResponse(b)
		_, _, _ = parseMetaRegionServer(b)
	})
}

// TestScanFrameSeedDecodes checks the fuzz seed really is a valid frame, so the fuzzer starts from
// meaningful input.
func TestScanFrameSeedDecodes(t *testing.T) {
	fr, err := parseResponseFrame(seedScanFrame())
	if err != nil || fr.callID == nil || *fr.callID != 7 {
		t.Fatalf("frame: %+v %v", fr, err)
	}
	sr, err := parseScanResponse(fr.param, fr.cells)
	if err != nil {
		t.Fatal(err)
	}
	if sr.scannerID != 99 || len(sr.results) != 1 || len(sr.results[0].Cells) != 2 {
		t.Fatalf("scan response %+v", sr)
	}
	c := sr.results[0].Cells[1]
	if string(c.Row) != "row" || string(c.Qualifier) != "r" || c.Timestamp != 43 || c.Type != CellDelete || len(c.Value) != 0 {
		t.Fatalf("second cell %+v", c)
	}
}
