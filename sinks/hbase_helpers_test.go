package sinks

import (
	"context"
	"testing"
	"time"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/internal/testenv"
	"github.com/abacus-stream/abacus/store/hbasestore"
)

func hbaseClient(t *testing.T) *hbase.Client {
	t.Helper()
	quorum := testenv.HBaseZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := hbase.NewClient(ctx, hbase.Config{ZooKeeper: quorum})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func hbaseStore(t *testing.T, c *hbase.Client) *hbasestore.Store {
	t.Helper()
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func dropTable(t *testing.T, admin *hbase.Admin, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = admin.DisableTable(ctx, name)
		_ = admin.DeleteTable(ctx, name)
	})
}
