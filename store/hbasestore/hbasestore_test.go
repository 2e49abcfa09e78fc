package hbasestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/schema"
	"github.com/abacus-stream/abacus/store"
)

func TestEnsureTableCreatesPreSplitAndRefusesMismatch(t *testing.T) {
	c := testenv.HBaseClient(t)
	admin := c.Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("sinktest_layout_%d", time.Now().UnixNano())
	testenv.DropTableAtEnd(t, c, name)
	st, err := New(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := schema.TableLayout{Name: name, Family: "a", SaltBuckets: 8, TTL: 30 * 24 * time.Hour}
	if _, err := st.SaltBuckets(ctx, name); !errors.Is(err, store.ErrNoSuchTable) {
		t.Fatalf("salt buckets of a missing table: %v", err)
	}
	if err := st.VerifyTable(ctx, l); !errors.Is(err, store.ErrNoSuchTable) {
		t.Fatalf("verify a missing table: %v", err)
	}
	if err := st.EnsureTable(ctx, l); err != nil {
		t.Fatal(err)
	}
	if n, err := st.SaltBuckets(ctx, name); err != nil || n != 8 {
		t.Fatalf("salt buckets read back: %d, %v", n, err)
	}
	if err := st.EnsureTable(ctx, l); err != nil {
		t.Fatalf("second EnsureTable on the same layout: %v", err)
	}
	spec, err := admin.DescribeTable(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Attributes[schema.AttrSaltBuckets] != "8" || len(spec.Families) != 1 || spec.Families[0].Attributes["TTL"] != "2592000" {
		t.Fatalf("table described as %+v", spec)
	}
	// The family settings read back as HBase keeps them: the layout's are no drift, another's is.
	settings, err := st.FamilySettings(ctx, name, "a")
	if err != nil {
		t.Fatal(err)
	}
	if d := l.Drift(settings); len(d) != 0 {
		t.Fatalf("a table just made with the layout drifts from it: %v (settings %v)", d, settings)
	}
	drifted := l
	drifted.TTL, drifted.Versions, drifted.Compression = 0, 3, "GZ"
	if d := drifted.Drift(settings); len(d) != 3 || !strings.Contains(strings.Join(d, "\n"), "TTL is 720h0m0s, the configuration says forever") {
		t.Fatalf("drift from another layout: %q (settings %v)", d, settings)
	}
	other := l
	other.SaltBuckets = 16
	if err := st.EnsureTable(ctx, other); err == nil || !strings.Contains(err.Error(), "abacus.salt.buckets=8") {
		t.Fatalf("EnsureTable with another bucket count: %v", err)
	}
	other = l
	other.Family = "zz"
	if err := st.VerifyTable(ctx, other); err == nil || !strings.Contains(err.Error(), `not "zz"`) {
		t.Fatalf("EnsureTable with another family: %v", err)
	}
}

func TestHBaseStoreWritesAndFailsOnlyTheBadCells(t *testing.T) {
	c := testenv.HBaseClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("sinktest_store_%d", time.Now().UnixNano())
	testenv.DropTableAtEnd(t, c, name)
	if _, err := New(c, Config{Durability: hbase.SkipWAL}); err == nil {
		t.Fatal("SKIP_WAL accepted without ForceSkipWAL")
	}
	st, err := New(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureTable(ctx, schema.TableLayout{Name: name, Family: "f", SaltBuckets: 4}); err != nil {
		t.Fatal(err)
	}
	var cells []store.Cell
	for i := range 40 {
		fam := "f"
		if i%10 == 3 {
			fam = "missing"
		}
		e := fmt.Sprintf("dev%d", i%5)
		cells = append(cells, store.Cell{Table: name, Row: schema.FactRow(e, int64(1000+i), 4), Family: []byte(fam),
			Qualifier: fmt.Appendf(nil, "t:0:%d", i), Timestamp: int64(1000 + i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	failed, err := st.Write(ctx, cells)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 4 {
		t.Fatalf("%d cells failed, want the 4 of the missing family: %v", len(failed), failed)
	}
	for _, f := range failed {
		if !f.Permanent || string(cells[f.Index].Family) != "missing" || !strings.Contains(f.Err.Error(), "NoSuchColumnFamily") {
			t.Fatalf("cell %d failed with %v permanent=%v", f.Index, f.Err, f.Permanent)
		}
	}
	// Write again: identical cells, still one version each.
	if _, err := st.Write(ctx, cells); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = st.Scan(ctx, store.ScanSpec{Table: name, Prefix: schema.EntityPrefix("dev1", 4), MaxVersions: 10}, func(row []byte, cs []store.Cell) bool {
		e, ts, err := schema.ParseFactRow(row)
		if err != nil || e != "dev1" {
			t.Fatalf("prefix scan of dev1 returned row of %q (%v)", e, err)
		}
		for _, c := range cs {
			if c.Timestamp != ts || string(c.Value) != fmt.Sprintf("v%d", ts-1000) {
				t.Fatalf("cell %s ts %d value %s in row at %d", c.Qualifier, c.Timestamp, c.Value, ts)
			}
		}
		n += len(cs)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i := range 40 {
		if i%5 == 1 && i%10 != 3 {
			want++
		}
	}
	if n != want {
		t.Fatalf("dev1 has %d cell versions, want %d (one per event)", n, want)
	}
	var rows []int64
	err = st.Scan(ctx, store.ScanSpec{Table: name, Prefix: schema.EntityPrefix("dev2", 4), Reversed: true, Limit: 3}, func(row []byte, _ []store.Cell) bool {
		_, ts, _ := schema.ParseFactRow(row)
		rows = append(rows, ts)
		return true
	})
	if err != nil || len(rows) != 3 || rows[0] > rows[1] {
		t.Fatalf("reversed limited scan: %v %v", rows, err)
	}
}

// TestOnlyHBasePermanentErrorsDeadLetter: a cell is dead-lettered only when the client says the
// failure is permanent; anything else (a closed client, a network error) is retried.
func TestOnlyHBasePermanentErrorsDeadLetter(t *testing.T) {
	cases := map[error]bool{
		&hbase.Error{Class: "org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException", Kind: hbase.KindPermanent}: true,
		&hbase.Error{Kind: hbase.KindReconnect}:                            false,
		&hbase.Error{Kind: hbase.KindBackoff}:                              false,
		hbase.ErrClosed:                                                    false,
		fmt.Errorf("wrapped: %w", &hbase.Error{Kind: hbase.KindPermanent}): true,
		fmt.Errorf("some network trouble"):                                 false,
	}
	for err, want := range cases {
		if got := isPermanent(err); got != want {
			t.Errorf("isPermanent(%v) = %v, want %v", err, got, want)
		}
	}
}
