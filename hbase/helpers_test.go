package hbase

import (
	"context"
	"fmt"
	"github.com/abacus-stream/abacus/internal/testenv/gate"
	"sync/atomic"
	"testing"
	"time"
)

// testQuorum returns the ZooKeeper quorum of the real test HBase, skipping the test when it is not
// reachable, or failing it when ABACUS_REQUIRE_SERVICES=1 (the README's test command sets it).
func testQuorum(t testing.TB) string { t.Helper(); return gate.HBaseZooKeeper(t) }

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testClient(t testing.TB, cfgs ...Config) *Client {
	t.Helper()
	var cfg Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	cfg.ZooKeeper = testQuorum(t)
	c, err := NewClient(testContext(t), cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var tableSeq atomic.Int64

// testTable creates a fresh table hbtest_<name>_<nanos> and deletes it when the test ends.
func testTable(t testing.TB, c *Client, name string, families []FamilySpec, splits [][]byte) string {
	t.Helper()
	table := fmt.Sprintf("hbtest_%s_%d_%d", name, time.Now().UnixNano(), tableSeq.Add(1))
	ctx := testContext(t)
	if err := c.Admin().CreateTable(ctx, TableSpec{Name: table, Families: families, SplitKeys: splits}); err != nil {
		t.Fatalf("create table %s: %v", table, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Admin().DisableTable(ctx, table); err != nil {
			t.Logf("disable %s: %v", table, err)
			return
		}
		if err := c.Admin().DeleteTable(ctx, table); err != nil {
			t.Logf("delete %s: %v", table, err)
		}
	})
	return table
}

func fam(names ...string) []FamilySpec {
	var out []FamilySpec
	for _, n := range names {
		out = append(out, FamilySpec{Name: n, Attributes: map[string]string{"VERSIONS": "5"}})
	}
	return out
}
