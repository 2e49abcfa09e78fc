package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
)

// HBaseClient connects to the test HBase (HBaseConfig: it skips or fails as HBaseZooKeeper does,
// and authenticates with Kerberos when ABACUS_HBASE_AUTH=kerberos) and closes the client when the
// test ends. Package hbase's own tests cannot use it (an import cycle) and keep a copy.
func HBaseClient(t testing.TB) *hbase.Client {
	t.Helper()
	cfg := HBaseConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := hbase.NewClient(ctx, cfg)
	if err != nil {
		t.Fatalf("hbase client for %s: %v", cfg.ZooKeeper, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// DropTableAtEnd deletes a table when the test ends, so that long-lived test servers do not
// gather tables.
func DropTableAtEnd(t testing.TB, c *hbase.Client, table string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.Admin().DisableTable(ctx, table)
		_ = c.Admin().DeleteTable(ctx, table)
	})
}
