package hbase

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRoundTripExplicitTimestamp writes cells with explicit timestamps and reads them back with
// exactly those timestamps and values.
func TestRoundTripExplicitTimestamp(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "roundtrip", fam("f"), nil)
	ctx := testContext(t)
	m := NewPut(table, []byte("row1")).
		Add("f", []byte("a"), 1000, []byte("va")).
		Add("f", []byte("b"), 2000, []byte("vb")).
		Add("f", []byte("empty"), 3000, nil)
	if err := c.Apply(ctx, []*Mutation{m}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("row1")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	want := map[string]struct {
		ts int64
		v  string
	}{"a": {1000, "va"}, "b": {2000, "vb"}, "empty": {3000, ""}}
	if len(res.Cells) != len(want) {
		t.Fatalf("got %d cells, want %d: %+v", len(res.Cells), len(want), res.Cells)
	}
	for _, cell := range res.Cells {
		w, ok := want[string(cell.Qualifier)]
		if !ok || cell.Timestamp != w.ts || string(cell.Value) != w.v || !bytes.Equal(cell.Row, []byte("row1")) || string(cell.Family) != "f" {
			t.Errorf("unexpected cell %s/%s:%s@%d=%q", cell.Row, cell.Family, cell.Qualifier, cell.Timestamp, cell.Value)
		}
	}
	// Column selection: one qualifier, then a whole family.
	res, err = c.Get(ctx, Get{Table: table, Row: []byte("row1"), Columns: []Column{{Family: "f", Qualifier: []byte("b")}}})
	if err != nil || len(res.Cells) != 1 || string(res.Cells[0].Qualifier) != "b" {
		t.Fatalf("get f:b: %v %+v", err, res)
	}
	res, err = c.Get(ctx, Get{Table: table, Row: []byte("row1"), Columns: []Column{{Family: "f", Qualifier: []byte("a")}, {Family: "f", Qualifier: []byte("empty")}}})
	if err != nil || len(res.Cells) != 2 {
		t.Fatalf("get f:a,f:empty: %v %+v", err, res)
	}
	res, err = c.Get(ctx, Get{Table: table, Row: []byte("nosuchrow")})
	if err != nil || len(res.Cells) != 0 {
		t.Fatalf("get of a missing row: %v %+v, want an empty result", err, res)
	}
	if _, err := c.Get(ctx, Get{Table: table, Row: []byte("row1"), Columns: []Column{{Family: "nope"}}}); err == nil || IsRetriable(err) {
		t.Fatalf("get of a missing family: %v, want a permanent error", err)
	}
}

func put1(table, row, qual string, ts int64, v string) *Mutation {
	return NewPut(table, []byte(row)).Add("f", []byte(qual), ts, []byte(v))
}

// rawVersions returns every stored cell of row (raw scan, all versions), delete markers included.
func rawVersions(t *testing.T, c *Client, table, row string) []Cell {
	t.Helper()
	sc := c.Scan(Scan{Table: table, StartRow: []byte(row), StopRow: append([]byte(row), 0), Raw: true, MaxVersions: AllVersions})
	defer sc.Close()
	var out []Cell
	for {
		r, err := sc.Next(testContext(t))
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("raw scan: %v", err)
		}
		out = append(out, r.Cells...)
	}
}

// TestSameCellTwiceKeepsOneVersion: rewriting (row, family, qualifier, timestamp) replaces the value
// and leaves one version, which is what makes replays idempotent.
func TestSameCellTwiceKeepsOneVersion(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "onever", fam("f"), nil)
	ctx := testContext(t)
	for _, v := range []string{"first", "second"} {
		if err := c.Apply(ctx, []*Mutation{put1(table, "r", "q", 5000, v)}); err != nil {
			t.Fatalf("apply %s: %v", v, err)
		}
	}
	cells := rawVersions(t, c, table, "r")
	if len(cells) != 1 || string(cells[0].Value) != "second" || cells[0].Timestamp != 5000 {
		t.Fatalf("raw cells after writing one cell twice: %+v, want one version 'second'@5000", cells)
	}
}

// TestOlderTimestampNeverHidesNewer: a late write with an older timestamp becomes an older version.
func TestOlderTimestampNeverHidesNewer(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "older", fam("f"), nil)
	ctx := testContext(t)
	if err := c.Apply(ctx, []*Mutation{put1(table, "r", "q", 2000, "new")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, []*Mutation{put1(table, "r", "q", 1000, "old")}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("r")})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := res.Value("f", "q"); !ok || string(v) != "new" {
		t.Fatalf("newest value %q (found %v), want new", v, ok)
	}
	res, err = c.Get(ctx, Get{Table: table, Row: []byte("r"), MaxVersions: AllVersions})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 2 || res.Cells[0].Timestamp != 2000 || res.Cells[1].Timestamp != 1000 {
		t.Fatalf("all versions: %+v, want 2000 then 1000", res.Cells)
	}
	// A time range selects the old version only.
	res, err = c.Get(ctx, Get{Table: table, Row: []byte("r"), TimeRange: TimeRange{From: 0, To: 1500}})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := res.Value("f", "q"); !ok || string(v) != "old" {
		t.Fatalf("value in [0,1500): %q, want old", v)
	}
}

// TestServerTimestampOnlyByName: a negative timestamp is refused before anything is sent, and
// ServerTimestamp gets the server's clock.
func TestServerTimestampOnlyByName(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "servertime", fam("f"), nil)
	ctx := testContext(t)
	sent := c.actionsSent.Load()
	err := c.Apply(ctx, []*Mutation{put1(table, "r", "q", -1, "x"), NewPut(table, []byte("r2"))})
	var be *BatchError
	if !errors.As(err, &be) || be.Failed != 2 || IsRetriable(be.Errs[0]) || IsRetriable(be.Errs[1]) {
		t.Fatalf("apply of invalid puts: %v, want two permanent failures", err)
	}
	if c.actionsSent.Load() != sent {
		t.Fatal("invalid mutations were sent")
	}
	before := time.Now().Add(-time.Hour).UnixMilli()
	if err := c.Apply(ctx, []*Mutation{put1(table, "r", "q", ServerTimestamp, "x")}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("r")})
	if err != nil || len(res.Cells) != 1 {
		t.Fatalf("get: %v %+v", err, res)
	}
	if ts := res.Cells[0].Timestamp; ts < before || ts == ServerTimestamp {
		t.Fatalf("server-stamped cell has timestamp %d", ts)
	}
}

// TestDeletes covers deleting one version, a column and a family, and that raw reads show markers.
func TestDeletes(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "deletes", fam("f", "g"), nil)
	ctx := testContext(t)
	m := NewPut(table, []byte("r")).
		Add("f", []byte("a"), 1, []byte("a1")).Add("f", []byte("a"), 2, []byte("a2")).
		Add("f", []byte("b"), 1, []byte("b1")).Add("f", []byte("b"), 2, []byte("b2")).
		Add("g", []byte("c"), 1, []byte("c1"))
	if err := c.Apply(ctx, []*Mutation{m}); err != nil {
		t.Fatal(err)
	}
	d := NewDelete(table, []byte("r")).DeleteVersion("f", []byte("a"), 2).DeleteColumn("f", []byte("b"), 2).DeleteFamily("g", 10)
	if err := c.Apply(ctx, []*Mutation{d}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("r"), MaxVersions: AllVersions})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 1 || string(res.Cells[0].Qualifier) != "a" || res.Cells[0].Timestamp != 1 {
		t.Fatalf("after deletes: %+v, want only f:a@1", res.Cells)
	}
	types := map[CellType]int{}
	for _, cell := range rawVersions(t, c, table, "r") {
		types[cell.Type]++
	}
	if types[CellDelete] != 1 || types[CellDeleteColumn] != 1 || types[CellDeleteFamily] != 1 || types[CellPut] != 5 {
		t.Fatalf("raw cell types %v, want 5 puts and one marker of each delete kind", types)
	}
}

// TestMissingFamilyFailsOnlyThoseActions: in one batch, actions to a family the table lacks fail
// permanently and are not resent; the others land.
func TestMissingFamilyFailsOnlyThoseActions(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "nofam", fam("f"), [][]byte{[]byte("m")})
	ctx := testContext(t)
	var ms []*Mutation
	bad := map[int]bool{}
	for i := range 20 {
		row := fmt.Sprintf("%c%02d", 'a'+byte(i%2)*20, i)
		family := "f"
		if i%4 == 1 {
			family = "nope"
			bad[i] = true
		}
		ms = append(ms, NewPut(table, []byte(row)).Add(family, []byte("q"), 7, []byte("v")))
	}
	sent := c.actionsSent.Load()
	err := c.Apply(ctx, ms)
	var be *BatchError
	if !errors.As(err, &be) {
		t.Fatalf("apply: %v, want a BatchError", err)
	}
	if be.Failed != len(bad) {
		t.Fatalf("%d failed, want %d: %v", be.Failed, len(bad), err)
	}
	for i, e := range be.Errs {
		if bad[i] {
			var he *Error
			if !errors.As(e, &he) || he.Retriable() || !strings.HasSuffix(he.Class, "NoSuchColumnFamilyException") {
				t.Errorf("mutation %d: %v, want permanent NoSuchColumnFamilyException", i, e)
			}
			continue
		}
		if e != nil {
			t.Errorf("mutation %d failed: %v", i, e)
		}
		res, err := c.Get(ctx, Get{Table: table, Row: ms[i].Row})
		if err != nil || len(res.Cells) != 1 {
			t.Errorf("mutation %d did not land: %v %+v", i, err, res)
		}
	}
	if got := c.actionsSent.Load() - sent; got != int64(len(ms)) {
		t.Fatalf("%d actions sent for %d mutations: permanent failures were resent", got, len(ms))
	}
}

// splitKeys16 returns 15 split keys "1".."f" that cut hex-prefixed rows into 16 regions.
func splitKeys16() [][]byte {
	var ks [][]byte
	for i := 1; i < 16; i++ {
		ks = append(ks, []byte(fmt.Sprintf("%x", i)))
	}
	return ks
}

// TestPresplitBatchSpreadsOverAllRegions: one Apply to a 16-region table lands in every region.
func TestPresplitBatchSpreadsOverAllRegions(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "split16", fam("f"), splitKeys16())
	ctx := testContext(t)
	const perRegion = 50
	var ms []*Mutation
	for i := range 16 * perRegion {
		row := fmt.Sprintf("%x-%05d", i%16, i)
		ms = append(ms, put1(table, row, "q", int64(i), strconv.Itoa(i)))
	}
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	c.regions.mu.RLock()
	regions := append([]*region(nil), c.regions.tables[table]...)
	c.regions.mu.RUnlock()
	if len(regions) != 16 {
		t.Fatalf("%d regions cached, want 16", len(regions))
	}
	for _, r := range regions {
		n := countRows(t, c, Scan{Table: table, StartRow: r.start, StopRow: r.end})
		if n != perRegion {
			t.Errorf("region [%q,%q) has %d rows, want %d", r.start, r.end, n, perRegion)
		}
	}
	if n := countRows(t, c, Scan{Table: table, Caching: 7}); n != 16*perRegion {
		t.Fatalf("full scan across regions: %d rows, want %d", n, 16*perRegion)
	}
}

func scanRows(t *testing.T, c *Client, s Scan) []string {
	t.Helper()
	sc := c.Scan(s)
	defer sc.Close()
	var rows []string
	for {
		r, err := sc.Next(testContext(t))
		if err == io.EOF {
			return rows
		}
		if err != nil {
			t.Fatalf("scan %+v: %v", s, err)
		}
		rows = append(rows, string(r.Row()))
	}
}

func countRows(t *testing.T, c *Client, s Scan) int { return len(scanRows(t, c, s)) }

// TestScans covers ranges across regions, reversed scans, prefix bounds and small caching.
func TestScans(t *testing.T) {
	c := testClient(t)
	// Split keys given out of order: CreateTable sorts them.
	table := testTable(t, c, "scans", fam("f"), [][]byte{[]byte("ab1|"), []byte("ab12|"), []byte("ab2"), []byte("c")})
	ctx := testContext(t)
	// Byte order: "ab12|..." sorts before "ab1|..." because '2' < '|'.
	rows := []string{"a", "ab12|1", "ab12|2", "ab1|1", "ab1|2", "ab1|3", "ab2|1", "b", "c", "d", "e"}
	var ms []*Mutation
	for _, r := range rows {
		ms = append(ms, put1(table, r, "q", 1, r))
	}
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	rev := func(s []string) []string {
		out := append([]string(nil), s...)
		slices.Reverse(out)
		return out
	}
	cases := []struct {
		name string
		s    Scan
		want []string
	}{
		{"all", Scan{}, rows},
		{"all caching 1", Scan{Caching: 1}, rows},
		{"range across regions", Scan{StartRow: []byte("ab12|2"), StopRow: []byte("d")}, rows[2:9]},
		{"prefix device ab1 does not match ab12", Scan{Prefix: []byte("ab1|")}, rows[3:6]},
		{"prefix device ab12", Scan{Prefix: []byte("ab12|")}, rows[1:3]},
		{"prefix ab1 matches bytes", Scan{Prefix: []byte("ab1")}, rows[1:6]},
		{"reversed all", Scan{Reversed: true}, rev(rows)},
		{"reversed caching 2", Scan{Reversed: true, Caching: 2}, rev(rows)},
		{"reversed range", Scan{Reversed: true, StartRow: []byte("c"), StopRow: []byte("ab12|1")}, rev(rows[2:9])},
		{"reversed prefix device ab1", Scan{Reversed: true, Prefix: []byte("ab1|")}, rev(rows[3:6])},
		{"reversed prefix device ab12", Scan{Reversed: true, Prefix: []byte("ab12|")}, rev(rows[1:3])},
		{"empty range", Scan{StartRow: []byte("x")}, nil},
	}
	for _, tc := range cases {
		tc.s.Table = table
		got := scanRows(t, c, tc.s)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestScanVersionsAndTimeRange counts versions through scans.
func TestScanVersionsAndTimeRange(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "scanver", fam("f"), nil)
	ctx := testContext(t)
	m := NewPut(table, []byte("r"))
	for ts := int64(1); ts <= 4; ts++ {
		m.Add("f", []byte("q"), ts*10, []byte(strconv.Itoa(int(ts))))
	}
	if err := c.Apply(ctx, []*Mutation{m}); err != nil {
		t.Fatal(err)
	}
	count := func(s Scan) int {
		s.Table = table
		sc := c.Scan(s)
		defer sc.Close()
		n := 0
		for {
			r, err := sc.Next(ctx)
			if err == io.EOF {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			n += len(r.Cells)
		}
	}
	if n := count(Scan{}); n != 1 {
		t.Errorf("default scan: %d cells, want 1", n)
	}
	if n := count(Scan{MaxVersions: AllVersions}); n != 4 {
		t.Errorf("all versions: %d cells, want 4", n)
	}
	if n := count(Scan{Columns: []Column{{Family: "f", Qualifier: []byte("q")}}, MaxVersions: AllVersions}); n != 4 {
		t.Errorf("column f:q, all versions: %d cells, want 4", n)
	}
	if n := count(Scan{Columns: []Column{{Family: "f", Qualifier: []byte("other")}}}); n != 0 {
		t.Errorf("column f:other: %d cells, want 0", n)
	}
	if n := count(Scan{MaxVersions: 3}); n != 3 {
		t.Errorf("3 versions: %d cells, want 3", n)
	}
	if n := count(Scan{MaxVersions: AllVersions, TimeRange: TimeRange{From: 20, To: 40}}); n != 2 {
		t.Errorf("time range [20,40): %d cells, want 2", n)
	}
}

// TestTooLargeCellFailsOnlyItself: a cell over the server's hbase.server.keyvalue.maxsize (10 MiB by
// default) is refused permanently; the rest of the batch lands. SKIP_WAL, asked for by name, is
// accepted.
func TestTooLargeCellFailsOnlyItself(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "bigcell", fam("f"), nil)
	ctx := testContext(t)
	big := make([]byte, 11<<20)
	small := put1(table, "small", "q", 1, "v")
	small.Durability = SkipWAL
	ms := []*Mutation{put1(table, "a", "q", 1, "v"), NewPut(table, []byte("big")).Add("f", []byte("q"), 1, big), small}
	err := c.Apply(ctx, ms)
	var be *BatchError
	if !errors.As(err, &be) || be.Failed != 1 || be.Errs[1] == nil || IsRetriable(be.Errs[1]) {
		t.Fatalf("apply: %v, want only the big cell to fail, permanently", err)
	}
	for _, row := range []string{"a", "small"} {
		res, err := c.Get(ctx, Get{Table: table, Row: []byte(row)})
		if err != nil || len(res.Cells) != 1 {
			t.Fatalf("row %s: %v %+v", row, err, res)
		}
	}
	t.Logf("big cell refused with: %v", be.Errs[1])
}

// TestSmallCapsManyRequests forces many small Multi requests (10 actions, at most 2 in flight per
// server and 1 per region) over a 16-region table: concurrent Apply calls share the bounds without
// deadlock, and every action lands exactly once.
func TestSmallCapsManyRequests(t *testing.T) {
	c := testClient(t, Config{MaxBatchActions: 10, MaxBatchBytes: 4 << 20, MaxInFlightPerServer: 2, MaxInFlightPerRegion: 1})
	table := testTable(t, c, "smallcaps", fam("f"), splitKeys16())
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ms []*Mutation
			for i := range 400 {
				ms = append(ms, put1(table, fmt.Sprintf("%x-%d-%04d", i%16, g, i), "q", 1, "v"))
			}
			if err := c.Apply(ctx, ms); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := countRows(t, c, Scan{Table: table}); n != 1600 {
		t.Fatalf("%d rows, want 1600", n)
	}
	if sent := c.actionsSent.Load(); sent != 1600 {
		t.Fatalf("%d actions sent for 1600 mutations", sent)
	}
}

// TestMissingTableFailsOnlyItsActions: in one batch, mutations to a table that does not exist fail
// permanently with TableNotFoundException and are not sent; the others land.
func TestMissingTableFailsOnlyItsActions(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "tablemix", fam("f"), nil)
	ctx := testContext(t)
	missing := fmt.Sprintf("hbtest_missing_%d", time.Now().UnixNano())
	var ms []*Mutation
	for i := range 10 {
		tb := table
		if i%2 == 1 {
			tb = missing
		}
		ms = append(ms, put1(tb, fmt.Sprintf("r%d", i), "q", 1, "v"))
	}
	sent := c.actionsSent.Load()
	err := c.Apply(ctx, ms)
	var be *BatchError
	if !errors.As(err, &be) || be.Failed != 5 {
		t.Fatalf("apply: %v, want 5 failures", err)
	}
	for i, e := range be.Errs {
		var he *Error
		if i%2 == 1 && (!errors.As(e, &he) || he.Retriable() || !strings.HasSuffix(he.Class, "TableNotFoundException")) {
			t.Errorf("mutation %d to the missing table: %v", i, e)
		}
		if i%2 == 0 && e != nil {
			t.Errorf("mutation %d to %s: %v", i, table, e)
		}
	}
	if got := c.actionsSent.Load() - sent; got != 5 {
		t.Fatalf("%d actions sent, want the 5 to the existing table", got)
	}
	if n := countRows(t, c, Scan{Table: table}); n != 5 {
		t.Fatalf("%d rows landed, want 5", n)
	}
}
