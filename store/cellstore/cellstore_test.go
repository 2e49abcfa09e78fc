package cellstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
)

func put(row, qual string, ts int64, val string) store.Cell {
	return store.Cell{Table: "t", Row: []byte(row), Family: []byte("f"), Qualifier: []byte(qual), Timestamp: ts, Value: []byte(val)}
}

func scanAll(t *testing.T, s *Store, sc store.ScanSpec) map[string][]store.Cell {
	t.Helper()
	out := map[string][]store.Cell{}
	if err := s.Scan(context.Background(), sc, func(row []byte, cells []store.Cell) bool {
		out[string(row)] = cells
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVersionsAreReplacedAndNewestWins(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateTable("t", map[string]int{"f": 3}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []store.Cell{put("r", "q", 10, "a"), put("r", "q", 10, "a"), put("r", "q", 30, "new"), put("r", "q", 20, "old")} {
		if f, err := s.Write(ctx, []store.Cell{c}); err != nil || f != nil {
			t.Fatal(f, err)
		}
	}
	got := scanAll(t, s, store.ScanSpec{Table: "t", MaxVersions: 10})["r"]
	want := []string{"30=new", "20=old", "10=a"}
	if len(got) != len(want) {
		t.Fatalf("got %d versions, want %v", len(got), want)
	}
	for i, c := range got {
		if fmt.Sprintf("%d=%s", c.Timestamp, c.Value) != want[i] {
			t.Fatalf("version %d = %d=%s, want %s", i, c.Timestamp, c.Value, want[i])
		}
	}
	if one := scanAll(t, s, store.ScanSpec{Table: "t"})["r"]; len(one) != 1 || string(one[0].Value) != "new" {
		t.Fatalf("default read = %v, want the newest value only", one)
	}
	// A fourth version pushes the oldest out (VERSIONS=3).
	s.Write(ctx, []store.Cell{put("r", "q", 40, "newest")})
	if got := scanAll(t, s, store.ScanSpec{Table: "t", MaxVersions: 10})["r"]; len(got) != 3 || got[2].Timestamp != 20 {
		t.Fatalf("after a fourth version: %v", got)
	}
}

func TestPermanentFailuresAreReportedPerCell(t *testing.T) {
	s, _ := Open("")
	defer s.Close()
	s.CreateTable("t", map[string]int{"f": 1})
	s.MaxCellSize = 10
	cells := []store.Cell{put("a", "q", 1, "ok"), {Table: "t", Row: []byte("b"), Family: []byte("nope"), Qualifier: []byte("q"), Timestamp: 1},
		{Table: "missing", Row: []byte("c"), Family: []byte("f"), Timestamp: 1}, put("d", "q", 1, "much too large a value"), put("e", "q", 1, "ok")}
	failed, err := s.Write(context.Background(), cells)
	if err != nil {
		t.Fatal(err)
	}
	wantErr := map[int]error{1: ErrNoSuchFamily, 2: ErrNoSuchTable, 3: ErrCellTooLarge}
	if len(failed) != len(wantErr) {
		t.Fatalf("failed = %v", failed)
	}
	for _, f := range failed {
		if !f.Permanent || !errors.Is(f.Err, wantErr[f.Index]) {
			t.Fatalf("cell %d failed with %v (permanent %v), want %v", f.Index, f.Err, f.Permanent, wantErr[f.Index])
		}
	}
	rows := scanAll(t, s, store.ScanSpec{Table: "t"})
	if len(rows["a"]) != 1 || len(rows["e"]) != 1 || len(rows["d"]) != 0 {
		t.Fatalf("rows after a partly failed write: %v", rows)
	}
}

func TestScanPrefixReversedAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	s.CreateTable("t", map[string]int{"f": 1})
	var cells []store.Cell
	for _, e := range []string{"ab1", "ab12", "ab"} {
		for ts := int64(1); ts <= 3; ts++ {
			cells = append(cells, store.Cell{Table: "t", Row: schema.FactRow(e, ts*1000, 1), Family: []byte("f"), Qualifier: []byte("x"), Timestamp: ts * 1000, Value: []byte(e)})
		}
	}
	if _, err := s.Write(context.Background(), cells); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, rev := range []bool{false, true} {
		var times []int64
		err := s.Scan(context.Background(), store.ScanSpec{Table: "t", Prefix: schema.EntityPrefix("ab1", 1), Reversed: rev}, func(row []byte, cs []store.Cell) bool {
			if string(cs[0].Value) != "ab1" {
				t.Fatalf("prefix scan of ab1 returned a row of %q", cs[0].Value)
			}
			times = append(times, cs[0].Timestamp)
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{3000, 2000, 1000} // newest first: reversed time in the row key
		if rev {
			want = []int64{1000, 2000, 3000}
		}
		if fmt.Sprint(times) != fmt.Sprint(want) {
			t.Fatalf("reversed=%v: times %v, want %v", rev, times, want)
		}
	}
	n := 0
	s.Scan(context.Background(), store.ScanSpec{Table: "t", Limit: 2}, func([]byte, []store.Cell) bool { n++; return true })
	if n != 2 {
		t.Fatalf("limit 2 returned %d rows", n)
	}
	if fams, ok := s.Families("t"); !ok || fams["f"] != 1 {
		t.Fatalf("schema not kept across reopen: %v %v", fams, ok)
	}
}

// TestTableLayoutSurvivesReopen: a table made for a layout records its salt bucket count, which a
// reader takes back (also after the store is reopened), and a layout that differs is refused.
func TestTableLayoutSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := schema.TableLayout{Name: "agg", Family: "d", SaltBuckets: 8}
	if _, err := s.SaltBuckets(ctx, "agg"); !errors.Is(err, store.ErrNoSuchTable) {
		t.Fatalf("salt buckets of a missing table: %v", err)
	}
	if err := s.VerifyTable(ctx, l); !errors.Is(err, store.ErrNoSuchTable) {
		t.Fatalf("verify a missing table: %v", err)
	}
	if err := s.EnsureTable(ctx, l); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.SaltBuckets(ctx, "agg"); err != nil || n != 8 {
		t.Fatalf("salt buckets after reopen: %d, %v", n, err)
	}
	if err := s.EnsureTable(ctx, l); err != nil {
		t.Fatalf("ensure the same layout again: %v", err)
	}
	other := l
	other.SaltBuckets = 16
	if err := s.VerifyTable(ctx, other); err == nil || !strings.Contains(err.Error(), "abacus.salt.buckets=8") {
		t.Fatalf("verify with another bucket count: %v", err)
	}
	other = l
	other.Family = "x"
	if err := s.EnsureTable(ctx, other); err == nil || !strings.Contains(err.Error(), `not "x"`) {
		t.Fatalf("ensure with another family: %v", err)
	}
}
