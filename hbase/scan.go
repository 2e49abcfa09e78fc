package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Scan describes a range read. The zero value of each field means "no restriction" or the default.
type Scan struct {
	Table string // "table" or "ns:table"
	// StartRow is inclusive, StopRow exclusive. For a Reversed scan StartRow is the upper end (still
	// inclusive) and StopRow the lower (still exclusive). Empty means unbounded.
	StartRow, StopRow []byte
	// Prefix, when set, replaces StartRow and StopRow by the exact range of rows starting with it.
	// A prefix matches bytes, so "ab1" also matches "ab12": end it with a separator ("ab1|").
	Prefix      []byte
	Reversed    bool      // newest row key first: from StartRow down to StopRow
	Columns     []Column  // families or columns to read; none means all
	TimeRange   TimeRange // versions to consider; zero means all time
	MaxVersions int       // versions per column; 0 means 1, AllVersions means all
	// Caching is the number of rows fetched per RPC; 0 means 1,000.
	Caching int
	// MaxResultSize bounds the bytes fetched per RPC; 0 means 2 MiB.
	MaxResultSize int64
	// Raw returns delete markers and deleted cells too, as they are stored.
	Raw bool
	// Ranges, when set, return only rows in one of them, [Start, Stop) each (an empty Stop: to
	// the end), within StartRow and StopRow: HBase's MultiRowRangeFilter, which seeks from one
	// range to the next. One scan then reads many short ranges of a region (many entities' rows)
	// instead of a scan, and a round trip, each.
	Ranges []RowRange
}

// RowRange is a range of rows: Start inclusive, Stop exclusive (empty: unbounded).
type RowRange struct{ Start, Stop []byte }

// multiRowRangeFilter is the Filter{name, serialized_filter} message of a MultiRowRangeFilter:
// MultiRowRangeFilter{row_range_list=1 RowRange{start_row=1, start_row_inclusive=2, stop_row=3,
// stop_row_inclusive=4}}.
func appendMultiRowRangeFilter(b []byte, num protowire.Number, ranges []RowRange) []byte {
	return appendMessage(b, num, func(b []byte) []byte {
		b = appendStringField(b, 1, "org.apache.hadoop.hbase.filter.MultiRowRangeFilter")
		return appendMessage(b, 2, func(b []byte) []byte {
			for _, r := range ranges {
				b = appendMessage(b, 1, func(b []byte) []byte {
					b = appendBytesField(b, 1, r.Start)
					b = appendBoolField(b, 2, true)
					b = appendBytesField(b, 3, r.Stop)
					return appendBoolField(b, 4, false)
				})
			}
			return b
		})
	})
}

// scanParams are the per-RPC fields of a ScanRequest.
type scanParams struct {
	scannerID    uint64
	rows         uint32
	close        bool
	renew        bool
	excludeStart bool
	includeStop  bool
}

// appendScanRequest appends a ScanRequest: an open request (region + scan) when p.scannerID is 0,
// else a next/close/renew request for that scanner.
func appendScanRequest(b []byte, regionName []byte, s *Scan, p scanParams) []byte {
	if p.scannerID != 0 {
		b = appendVarintField(b, 3, p.scannerID)
	} else {
		b = appendRegionSpecifier(b, 1, regionName)
		b = appendMessage(b, 2, func(b []byte) []byte {
			b = appendColumns(b, 1, s.Columns)
			if s.Raw {
				b = appendNameBytesPair(b, 2, "_raw_", []byte{0xff}) // Java's Bytes.toBytes(true)
			}
			if len(s.StartRow) > 0 {
				b = appendBytesField(b, 3, s.StartRow)
			}
			if len(s.StopRow) > 0 {
				b = appendBytesField(b, 4, s.StopRow)
			}
			if len(s.Ranges) > 0 {
				b = appendMultiRowRangeFilter(b, 5, s.Ranges)
			}
			b = appendTimeRange(b, 6, s.TimeRange)
			if s.MaxVersions > 1 {
				b = appendVarintField(b, 7, uint64(s.MaxVersions))
			}
			if s.MaxResultSize > 0 {
				b = appendVarintField(b, 10, uint64(s.MaxResultSize))
			}
			if s.Reversed {
				b = appendBoolField(b, 15, true)
			}
			if s.Caching > 0 {
				b = appendVarintField(b, 17, uint64(s.Caching))
			}
			if p.excludeStart {
				b = appendBoolField(b, 21, false)
			}
			if p.includeStop {
				b = appendBoolField(b, 22, true)
			}
			return b
		})
	}
	b = appendVarintField(b, 4, uint64(p.rows))
	if p.close {
		b = appendBoolField(b, 5, true)
	}
	if p.renew {
		b = appendBoolField(b, 10, true)
	}
	return b
}

type scanResponse struct {
	scannerID           uint64
	moreResults         *bool
	moreResultsInRegion *bool
	ttl                 uint32
	results             []Result
}

// parseScanResponse decodes ScanResponse{cells_per_result=1, scanner_id=2, more_results=3, ttl=4,
// results=5, more_results_in_region=8}. Cells come from the cell block (cells_per_result gives how
// many per row) or, when the server sent no cell block, from the results' protobuf cells.
func parseScanResponse(b, cellBlock []byte) (scanResponse, error) {
	var sr scanResponse
	var perResult []uint32
	var pbResults [][]byte
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			perResult = append(perResult, uint32(v))
		case num == 1 && typ == protowire.BytesType: // packed repeated
			for len(raw) > 0 {
				x, n := protowire.ConsumeVarint(raw)
				if n < 0 {
					return protowire.ParseError(n)
				}
				perResult = append(perResult, uint32(x))
				raw = raw[n:]
			}
		case num == 2 && typ == protowire.VarintType:
			sr.scannerID = v
		case num == 3 && typ == protowire.VarintType:
			x := v != 0
			sr.moreResults = &x
		case num == 4 && typ == protowire.VarintType:
			sr.ttl = uint32(v)
		case num == 5 && typ == protowire.BytesType:
			pbResults = append(pbResults, raw)
		case num == 8 && typ == protowire.VarintType:
			x := v != 0
			sr.moreResultsInRegion = &x
		}
		return nil
	})
	if err != nil {
		return sr, fmt.Errorf("hbase: scan response: %w", err)
	}
	cr := cellReader{b: cellBlock}
	if len(perResult) > 0 {
		total := 0
		for _, n := range perResult {
			total += int(n)
			if total > len(cr.b)/12+1 {
				return sr, fmt.Errorf("hbase: scan response: %d cells announced, %d bytes of cell block", total, len(cr.b))
			}
		}
		// One backing array for every row's cells: one allocation per response, not per row.
		all := make([]Cell, 0, total)
		sr.results = make([]Result, 0, len(perResult))
		for _, n := range perResult {
			start := len(all)
			for range n {
				cell, err := cr.next()
				if err != nil {
					return sr, fmt.Errorf("hbase: scan response: %w", err)
				}
				all = append(all, cell)
			}
			sr.results = append(sr.results, Result{Cells: all[start:len(all):len(all)]})
		}
		return sr, nil
	}
	for _, raw := range pbResults {
		res, err := parseResult(raw, &cr)
		if err != nil {
			return sr, fmt.Errorf("hbase: scan response: %w", err)
		}
		sr.results = append(sr.results, res)
	}
	return sr, nil
}

// parseResult decodes Result{cell=1, associated_cell_count=2}: protobuf cells, plus
// associated_cell_count cells taken from the cell block.
func parseResult(b []byte, cr *cellReader) (Result, error) {
	var res Result
	var assoc uint64
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			c, err := parseCell(raw)
			if err != nil {
				return err
			}
			res.Cells = append(res.Cells, c)
		case num == 2 && typ == protowire.VarintType:
			assoc = v
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if assoc > uint64(len(cr.b)/12+1) {
		return res, fmt.Errorf("%d cells announced, %d bytes of cell block", assoc, len(cr.b))
	}
	for range assoc {
		c, err := cr.next()
		if err != nil {
			return res, err
		}
		res.Cells = append(res.Cells, c)
	}
	return res, nil
}

// parseCell decodes Cell{row=1, family=2, qualifier=3, timestamp=4, cell_type=5, value=6}.
func parseCell(b []byte) (Cell, error) {
	c := Cell{Type: CellPut}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			c.Row = raw
		case num == 2 && typ == protowire.BytesType:
			c.Family = raw
		case num == 3 && typ == protowire.BytesType:
			c.Qualifier = raw
		case num == 4 && typ == protowire.VarintType:
			c.Timestamp = int64(v)
		case num == 5 && typ == protowire.VarintType:
			c.Type = CellType(v)
		case num == 6 && typ == protowire.BytesType:
			c.Value = raw
		}
		return nil
	})
	return c, err
}

// prefixEnd returns the smallest key greater than every key starting with prefix, or nil when there
// is none (the prefix is all 0xFF bytes).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Scanner iterates over the rows of a Scan, region after region. It is not safe for concurrent use.
// Close it when stopping early, to free the server-side scanner.
type Scanner struct {
	c   *Client
	s   Scan // StartRow/StopRow normalised
	err error

	region       *region
	scannerID    uint64 // 0: no open scanner
	start        []byte // where the next open starts
	excludeStart bool
	includeStop  bool
	before       bool // reversed: the next region is the one ending at start, not holding it
	buf          []Result
	done         bool
	lastRPC      time.Time
	ttl          time.Duration
}

// Scan starts a scan. No RPC is made until the first Next.
func (c *Client) Scan(s Scan) *Scanner {
	sc := &Scanner{c: c, s: s}
	if sc.s.Caching <= 0 {
		sc.s.Caching = 1000
	}
	if sc.s.MaxResultSize <= 0 {
		sc.s.MaxResultSize = 2 << 20
	}
	if s.Prefix != nil {
		end := prefixEnd(s.Prefix)
		if s.Reversed {
			// Start just below the first key past the prefix; end at the prefix itself, inclusive.
			sc.s.StartRow, sc.excludeStart = end, end != nil
			sc.s.StopRow, sc.includeStop = bytes.Clone(s.Prefix), true
		} else {
			sc.s.StartRow, sc.s.StopRow = bytes.Clone(s.Prefix), end
		}
	}
	sc.start = sc.s.StartRow
	return sc
}

// Next returns the next row, or io.EOF after the last one.
func (sc *Scanner) Next(ctx context.Context) (*Result, error) {
	for len(sc.buf) == 0 {
		if sc.err != nil {
			return nil, sc.err
		}
		if sc.done {
			return nil, io.EOF
		}
		if err := sc.fetch(ctx); err != nil {
			sc.err = err
			sc.closeScanner()
			return nil, err
		}
	}
	r := &sc.buf[0]
	sc.buf = sc.buf[1:]
	return r, nil
}

// Renew extends the lease of the open server-side scanner, for callers that hold a scanner idle
// longer than the server's lease period (hbase.client.scanner.timeout.period, 60 s by default). A
// scanner whose lease expired anyway is reopened after the last row returned, so Next never skips or
// repeats rows; Renew only saves that round trip.
func (sc *Scanner) Renew(ctx context.Context) error {
	if sc.scannerID == 0 {
		return nil
	}
	p := getBuf()
	*p = appendScanRequest(*p, nil, &sc.s, scanParams{scannerID: sc.scannerID, renew: true})
	_, _, err := sc.c.rpc(ctx, serviceClient, sc.region.addr, "Scan", p, nil)
	if err == nil {
		sc.lastRPC = time.Now()
	}
	return err
}

// Close releases the server-side scanner, if one is open.
func (sc *Scanner) Close() error {
	sc.closeScanner()
	sc.done = true
	return nil
}

func (sc *Scanner) closeScanner() {
	if sc.scannerID == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p := getBuf()
	*p = appendScanRequest(*p, nil, &sc.s, scanParams{scannerID: sc.scannerID, close: true})
	_, _, _ = sc.c.rpc(ctx, serviceClient, sc.region.addr, "Scan", p, nil)
	sc.scannerID = 0
}

func (sc *Scanner) lastRow() []byte {
	if len(sc.buf) == 0 {
		return nil
	}
	return sc.buf[len(sc.buf)-1].Row()
}

// fetch makes one scan RPC (opening a scanner on the current region when none is open), retrying
// per the error class, and moves on to the next region when this one is exhausted.
func (sc *Scanner) fetch(ctx context.Context) error {
	c := sc.c
	var last error
	rt := retries{c: c}
	for round := range c.cfg.MaxRounds {
		if round > 0 {
			if err := rt.wait(ctx, last); err != nil {
				return &Error{Op: "scan " + sc.s.Table, Kind: KindBackoff, Err: errors.Join(err, last)}
			}
		}
		if sc.scannerID == 0 && sc.region == nil {
			if err := sc.locateStart(ctx); err != nil {
				if retryHere(err) {
					last = err
					continue
				}
				return err
			}
		}
		resp, cb, err := c.rpc(ctx, serviceClient, sc.region.addr, "Scan", sc.request(), nil)
		if err != nil {
			if !sc.lost(err) {
				return err
			}
			last = err
			continue
		}
		sr, err := parseScanResponse(resp, cb)
		if err != nil {
			return &Error{Op: "scan " + sc.s.Table, Server: sc.region.addr, Kind: KindPermanent, Err: err}
		}
		if sc.scannerID != 0 && sr.moreResults == nil && sr.moreResultsInRegion == nil && len(sr.results) == 0 {
			// HBase 2 answers a next on a scanner it already closed with a bare, empty response
			// rather than an error. Region exhausted or not, reopening after the last row returned is
			// correct: an exhausted region answers the reopen with more_results_in_region=false.
			sc.scannerID = 0
			last = &Error{Op: "scan " + sc.s.Table, Server: sc.region.addr, Kind: KindBackoff, Message: "scanner closed by the server"}
			continue
		}
		sc.take(sr)
		return nil
	}
	return last
}

// locateStart finds the region the next scanner opens on: the one holding start, or for a
// reversed scan the one ending at start (after a region is done) or the table's last.
func (sc *Scanner) locateStart(ctx context.Context) error {
	var err error
	switch {
	case sc.s.Reversed && sc.before:
		sc.region, err = sc.c.locateBefore(ctx, sc.s.Table, sc.start)
	case sc.s.Reversed && len(sc.start) == 0:
		sc.region, err = sc.c.locateLast(ctx, sc.s.Table)
	default:
		sc.region, err = sc.c.locate(ctx, sc.s.Table, sc.start)
	}
	return err
}

// request is the next ScanRequest: an open at start on the current region, or a next on the open
// scanner.
func (sc *Scanner) request() *[]byte {
	p := getBuf()
	if sc.scannerID == 0 {
		open := sc.s
		open.StartRow = sc.start
		*p = appendScanRequest(*p, sc.region.name, &open, scanParams{
			rows: uint32(sc.s.Caching), excludeStart: sc.excludeStart, includeStop: sc.includeStop})
	} else {
		*p = appendScanRequest(*p, nil, &sc.s, scanParams{scannerID: sc.scannerID, rows: uint32(sc.s.Caching)})
	}
	return p
}

// lost reports whether a failed scan RPC only lost the scanner (lease expired, region moved,
// server restarted), and if so forgets it and its region, so that the next round reopens after
// the last row handed out, on a freshly located region. Any other error ends the scan.
func (sc *Scanner) lost(err error) bool {
	var e *Error
	if !errors.As(err, &e) || errors.Is(err, ErrAuthentication) || (e.Kind == KindPermanent && !strings.HasSuffix(e.Class, "UnknownScannerException") &&
		!strings.HasSuffix(e.Class, "OutOfOrderScannerNextException") && !strings.HasSuffix(e.Class, "ScannerResetException")) {
		return false
	}
	sc.scannerID = 0
	if e.Kind == KindRelocate {
		sc.c.relocate(sc.region, err)
	} else if e.Kind == KindReconnect {
		sc.c.invalidate(sc.region)
	}
	sc.region = nil
	return true
}

// take buffers a response's rows, keeps where to reopen, and moves on to the next region when the
// server says this one is exhausted, or ends the scan when it says the scan is.
func (sc *Scanner) take(sr scanResponse) {
	sc.scannerID = sr.scannerID
	sc.lastRPC = time.Now()
	if sr.ttl > 0 {
		sc.ttl = time.Duration(sr.ttl) * time.Millisecond
	}
	sc.buf = append(sc.buf, sr.results...)
	if lr := sc.lastRow(); lr != nil {
		// Resume point if the scanner has to be reopened.
		sc.start, sc.excludeStart, sc.before = lr, true, false
	}
	regionDone := len(sr.results) == 0
	if sr.moreResultsInRegion != nil {
		regionDone = !*sr.moreResultsInRegion
	}
	if sr.moreResults != nil && !*sr.moreResults {
		// The server reached the stop row (or the scan's end) and closed the scanner.
		sc.scannerID = 0
		sc.done = true
		return
	}
	if regionDone {
		if sc.scannerID != 0 && sr.moreResultsInRegion == nil {
			sc.closeScanner()
		}
		sc.scannerID = 0
		sc.nextRegion()
	}
}

// nextRegion moves the scan to the region after (or, reversed, before) the current one, or ends it.
func (sc *Scanner) nextRegion() {
	r := sc.region
	sc.region = nil
	if !sc.s.Reversed {
		if len(r.end) == 0 || (len(sc.s.StopRow) > 0 && bytes.Compare(r.end, sc.s.StopRow) >= 0) {
			sc.done = true
			return
		}
		sc.start, sc.excludeStart = r.end, false
		return
	}
	if len(r.start) == 0 || (len(sc.s.StopRow) > 0 && bytes.Compare(r.start, sc.s.StopRow) <= 0) {
		sc.done = true
		return
	}
	// Rows below the region's start key live in the previous region; the start key itself is not
	// one of them.
	sc.start, sc.excludeStart, sc.before = r.start, true, true
}
