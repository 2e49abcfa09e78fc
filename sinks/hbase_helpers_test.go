package sinks

import (
	"testing"

	"github.com/abacus-stream/abacus/hbase"
	"github.com/abacus-stream/abacus/store/hbasestore"
)

func hbaseStore(t *testing.T, c *hbase.Client) *hbasestore.Store {
	t.Helper()
	st, err := hbasestore.New(c, hbasestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
