package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAdminCreateDescribeListDelete creates a table with family attributes and split keys, reads the
// schema back from the master, lists it, and deletes it.
func TestAdminCreateDescribeListDelete(t *testing.T) {
	c := testClient(t)
	ctx := testContext(t)
	adm := c.Admin()
	name := fmt.Sprintf("hbtest_admin_%d", time.Now().UnixNano())
	spec := TableSpec{
		Name: name,
		Families: []FamilySpec{
			{Name: "a", Attributes: map[string]string{"VERSIONS": "3", "TTL": "86400", "BLOOMFILTER": "ROWCOL", "COMPRESSION": "GZ"}},
			{Name: "b"},
		},
		SplitKeys: [][]byte{[]byte("k"), []byte("t")},
	}
	if err := adm.CreateTable(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	err := adm.CreateTable(ctx, spec)
	var he *Error
	if !errors.As(err, &he) || he.Retriable() || !strings.HasSuffix(he.Class, "TableExistsException") {
		t.Errorf("second create: %v, want permanent TableExistsException", err)
	}
	// A codec the server does not know fails the create permanently (sanity check).
	bad := TableSpec{Name: name + "_badcodec", Families: []FamilySpec{{Name: "a", Attributes: map[string]string{"COMPRESSION": "NOSUCHCODEC"}}}}
	if err := adm.CreateTable(ctx, bad); err == nil || IsRetriable(err) {
		t.Errorf("create with an unknown codec: %v, want a permanent error", err)
	}
	got, err := adm.DescribeTable(ctx, name)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	if got.Name != name || len(got.Families) != 2 {
		t.Fatalf("described %+v", got)
	}
	a := got.Families[0]
	for k, v := range map[string]string{"VERSIONS": "3", "TTL": "86400", "BLOOMFILTER": "ROWCOL", "COMPRESSION": "GZ"} {
		if a.Attributes[k] != v {
			t.Errorf("family a %s = %q, want %q (all: %v)", k, a.Attributes[k], v, a.Attributes)
		}
	}
	tables, err := adm.ListTables(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tn := range tables {
		found = found || tn.String() == name
	}
	if !found {
		t.Fatalf("%s not in ListTables: %v", name, tables)
	}
	// Three regions from two split keys: one Put per region lands.
	var ms []*Mutation
	for _, row := range []string{"a", "m", "z"} {
		ms = append(ms, NewPut(name, []byte(row)).Add("a", []byte("q"), 1, []byte(row)))
	}
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	if n := len(c.regions.tables[name]); n != 3 {
		t.Errorf("%d regions, want 3", n)
	}
	if err := adm.DeleteTable(ctx, name); err == nil {
		t.Error("deleting an enabled table succeeded")
	}
	if err := adm.DisableTable(ctx, name); err != nil {
		t.Fatalf("disable: %v", err)
	}
	if err := adm.DeleteTable(ctx, name); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := adm.DescribeTable(ctx, name); err == nil || IsRetriable(err) {
		t.Fatalf("describe after delete: %v, want a permanent error", err)
	}
	err = c.Apply(ctx, ms[:1])
	if err == nil || IsRetriable(err) {
		t.Fatalf("put to deleted table: %v, want a permanent error", err)
	}
}

// TestBootstrapWithoutZooKeeper finds hbase:meta and the master through ClientMetaService.
func TestBootstrapWithoutZooKeeper(t *testing.T) {
	zc := testClient(t)
	ctx := testContext(t)
	master, err := ZooKeeperLocator{Quorum: zc.quorum}.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := zc.metaServer(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	table := testTable(t, zc, "bootstrap", fam("f"), nil)
	for _, boot := range []string{master.Addr(), meta} {
		c, err := NewClient(ctx, Config{Bootstrap: []string{boot}})
		if err != nil {
			t.Fatalf("bootstrap via %s: %v", boot, err)
		}
		if c.metaAddr != meta {
			t.Errorf("bootstrap via %s: meta on %s, ZooKeeper says %s", boot, c.metaAddr, meta)
		}
		if err := c.Apply(ctx, []*Mutation{put1(table, "r", "q", 1, boot)}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Get(ctx, Get{Table: table, Row: []byte("r")})
		if v, _ := res.Value("f", "q"); err != nil || string(v) != boot {
			t.Fatalf("get via bootstrap %s: %v %q", boot, err, v)
		}
		if _, err := c.Admin().ListTables(ctx, ""); err != nil {
			t.Fatalf("admin via bootstrap %s: %v", boot, err)
		}
		c.Close()
	}
}

// TestStaleRegionCacheIsRelocated plants a wrong region name in the cache: the server answers
// NotServingRegionException and the client relocates and lands the write.
func TestStaleRegionCacheIsRelocated(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "stale", fam("f"), nil)
	ctx := testContext(t)
	meta, _ := c.metaServer(ctx, false)
	c.regions.add(&region{table: table, name: []byte(table + ",,1.00000000000000000000000000000000."), addr: meta})
	if err := c.Apply(ctx, []*Mutation{put1(table, "r", "q", 1, "v")}); err != nil {
		t.Fatalf("apply with stale cache: %v", err)
	}
	c.regions.add(&region{table: table, name: []byte(table + ",,1.00000000000000000000000000000000."), addr: meta})
	res, err := c.Get(ctx, Get{Table: table, Row: []byte("r")})
	if err != nil || len(res.Cells) != 1 {
		t.Fatalf("get with stale cache: %v %+v", err, res)
	}
	c.regions.add(&region{table: table, name: []byte(table + ",,1.00000000000000000000000000000000."), addr: meta})
	if n := countRows(t, c, Scan{Table: table}); n != 1 {
		t.Fatalf("scan with stale cache: %d rows", n)
	}
}

// TestScannerReopensAfterLoss closes the server-side scanner behind the iterator's back (as a lease
// expiry would): the next call gets UnknownScannerException, and the scan resumes after the last row
// returned without skipping or repeating rows.
func TestScannerReopensAfterLoss(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "reopen", fam("f"), [][]byte{[]byte("r5")})
	ctx := testContext(t)
	var ms []*Mutation
	for i := range 10 {
		ms = append(ms, put1(table, "r"+string(rune('0'+i)), "q", 1, "v"))
	}
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	for _, reversed := range []bool{false, true} {
		sc := c.Scan(Scan{Table: table, Caching: 2, Reversed: reversed})
		var rows []string
		for {
			r, err := sc.Next(ctx)
			if err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatal(err)
			}
			rows = append(rows, string(r.Row()))
			if len(rows) == 1 || len(rows) == 6 {
				if err := sc.Renew(ctx); err != nil {
					t.Fatalf("renew: %v", err)
				}
				// Kill the server-side scanner; keep the iterator's id so it finds out.
				id := sc.scannerID
				sc.closeScanner()
				sc.scannerID = id
			}
		}
		sc.Close()
		if len(rows) != 10 {
			t.Fatalf("reversed=%v: rows %q, want 10 distinct", reversed, rows)
		}
		for i := 1; i < len(rows); i++ {
			if (rows[i] <= rows[i-1]) != reversed {
				t.Fatalf("reversed=%v: rows out of order or repeated: %q", reversed, rows)
			}
		}
	}
}

// TestPipelinedCalls runs many Gets at once over the one connection and checks each answer belongs
// to its own request.
func TestPipelinedCalls(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "pipeline", fam("f"), nil)
	ctx := testContext(t)
	var ms []*Mutation
	for i := range 200 {
		ms = append(ms, put1(table, rowName(i), "q", 1, rowName(i)))
	}
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Get(ctx, Get{Table: table, Row: []byte(rowName(i))})
			if err != nil {
				errs <- err
				return
			}
			if v, _ := res.Value("f", "q"); !bytes.Equal(v, []byte(rowName(i))) {
				errs <- errors.New("get " + rowName(i) + " answered " + string(v))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c.mu.Lock()
	n := len(c.conns)
	c.mu.Unlock()
	if n != 2 { // one to the region server, one to the master
		t.Errorf("%d connections, want 2", n)
	}
}

func rowName(i int) string {
	return "row" + string(rune('a'+i/26%26)) + string(rune('a'+i%26)) + string(rune('0'+i/676))
}

// TestCloseLeavesNoGoroutines: after Close no connection goroutine survives, and calls fail with
// ErrClosed.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	q := testQuorum(t)
	ctx := testContext(t)
	c, err := NewClient(ctx, Config{ZooKeeper: q})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin().ListTables(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, Get{Table: "hbase:meta", Row: []byte("hbase:namespace")}); err != nil {
		t.Fatal(err)
	}
	if n := connGoroutines(); n == 0 {
		t.Fatal("no connection goroutines while connected: the check below would prove nothing")
	}
	c.Close()
	if n := connGoroutines(); n != 0 {
		t.Fatalf("%d connection goroutines left after Close", n)
	}
	if _, err := c.Get(ctx, Get{Table: "hbase:meta", Row: []byte("x")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v, want ErrClosed", err)
	}
}

// connGoroutines counts goroutines of this package's connections, in every client of the process
// that is not closed (tests run sequentially, so only the test's own clients).
func connGoroutines() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	s := string(buf[:n])
	return strings.Count(s, "hbase.(*conn).readLoop") + strings.Count(s, "hbase.(*conn).writeLoop") + strings.Count(s, "go-zookeeper/zk.")
}

// TestDeadlineBoundsApply: an expired context fails every action as retriable, sending nothing.
func TestDeadlineBoundsApply(t *testing.T) {
	c := testClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Apply(ctx, []*Mutation{put1("hbtest_nosuchtable_deadline", "r", "q", 1, "v")})
	var be *BatchError
	if !errors.As(err, &be) || be.Failed != 1 || !IsRetriable(be.Errs[0]) {
		t.Fatalf("apply with a dead context: %v, want one retriable failure", err)
	}
}

// TestScanMeta reads hbase:meta forward and reversed: the catalog is located through ZooKeeper, not
// through itself.
func TestScanMeta(t *testing.T) {
	c := testClient(t)
	testTable(t, c, "scanmeta", fam("f"), [][]byte{[]byte("m")})
	fwd := scanRows(t, c, Scan{Table: "hbase:meta", Columns: []Column{{Family: "info", Qualifier: []byte("regioninfo")}}})
	rev := scanRows(t, c, Scan{Table: "hbase:meta", Reversed: true, Columns: []Column{{Family: "info", Qualifier: []byte("regioninfo")}}})
	if len(fwd) < 3 || len(fwd) != len(rev) {
		t.Fatalf("hbase:meta: %d rows forward, %d reversed", len(fwd), len(rev))
	}
	for i := range fwd {
		if fwd[i] != rev[len(rev)-1-i] {
			t.Fatalf("reversed meta scan is not the forward scan backwards at %d: %q vs %q", i, fwd[i], rev[len(rev)-1-i])
		}
	}
}

// TestRetryResendsOnlyFailedActions: in a batch over two regions where the cache holds a stale
// location for one of them, only that region's actions are sent a second time.
func TestRetryResendsOnlyFailedActions(t *testing.T) {
	c := testClient(t)
	table := testTable(t, c, "retryonly", fam("f"), [][]byte{[]byte("m")})
	ctx := testContext(t)
	var ms []*Mutation
	for _, row := range []string{"a1", "a2", "a3", "x1", "x2"} {
		ms = append(ms, put1(table, row, "q", 1, row))
	}
	if err := c.Apply(ctx, ms); err != nil { // fills the cache with both regions
		t.Fatal(err)
	}
	real := c.regions.lookup(table, []byte("x"))
	stale := *real
	stale.name = []byte(table + ",m,1.00000000000000000000000000000000.")
	c.regions.add(&stale)
	sent := c.actionsSent.Load()
	if err := c.Apply(ctx, ms); err != nil {
		t.Fatalf("apply with one stale region: %v", err)
	}
	// 5 actions in the first round, then only the 2 of the stale region again.
	if got := c.actionsSent.Load() - sent; got != 7 {
		t.Fatalf("%d actions sent, want 7 (5 + 2 resent)", got)
	}
	if r := c.regions.lookup(table, []byte("x")); r == nil || string(r.name) != string(real.name) {
		t.Fatalf("cache after relocation: %+v, want %q", r, real.name)
	}
}
