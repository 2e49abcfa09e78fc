package engine

import (
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"

	"github.com/abacus-stream/abacus/internal/plan"
	"github.com/abacus-stream/abacus/topology"
	"github.com/abacus-stream/abacus/windows"
)

// TestRebalanceKeepsKeptPartitions (DESIGN invariant 10): a rebalance keeps the in-memory view (idle
// clocks, what waits for acknowledgement) of the partitions the instance keeps, and forgets only
// those it loses.
func TestRebalanceKeepsKeptPartitions(t *testing.T) {
	b := topology.New("kept")
	topology.NewSource(b, "in", topology.Raw(), func(v []byte) string { return string(v) }, func([]byte) time.Time { return time.Unix(0, 0) }).
		Aggregate("m", windows.Tumbling(time.Minute)).Grace(0).Count("n")
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(plan.Of(topo), Config{IdleTimeout: time.Minute, FinalRetention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		e.SetStorage(p, storage.NewMemory())
	}
	p0, _ := e.partition(0)
	p1, _ := e.partition(1)
	e.Rebalanced(goka.Assignment{0: -1})
	if again, _ := e.partition(0); again != p0 {
		t.Fatal("a kept partition was rebuilt")
	}
	if again, _ := e.partition(1); again == p1 {
		t.Fatal("a lost partition was kept")
	}
	fresh := storage.NewMemory()
	e.SetStorage(0, fresh)
	if p0.tbl != fresh {
		t.Fatal("a kept partition reads the storage goka closed")
	}
}
